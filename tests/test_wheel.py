"""The built wheel, installed like any package, runs the main job from a folder outside the
checkout (issue 20): ``dls report`` reads the real traces shipped inside the package, ``dls
simulate --trace`` takes a shipped trace by name, and the metadata is complete.

How, and why this way (offline, about 30 s):

- The wheel is built with ``pip wheel --no-deps --no-build-isolation`` from a copy of the files
  it is made of (``pyproject.toml``, ``README.md``, ``LICENSE``, ``updater/``, ``sim/``), so the
  checkout gets no ``build/`` folder and no download of setuptools is needed (the project's venv
  has it).
- It is installed with ``--no-deps --no-index`` into a fresh venv (``python -m venv``, no system
  site-packages). The dependencies (nnabla, NumPy, matplotlib, tqdm) are not downloaded again:
  a ``.pth`` file in the fresh venv appends the project venv's site-packages to ``sys.path``.
  That folder holds only the dependencies and the project's *editable* hook, which a ``.pth``
  path entry does not activate (only site folders process ``.pth`` files), so ``updater`` and
  ``sim`` come from the wheel; the test checks that they do.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from sim.replay.measured import measured_paths
from sim.traces.real import MODELS, RECORDINGS, trace_path
from tests.paths import ROOT

pytestmark = pytest.mark.slow

SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "updater", "sim")


def run(command, cwd, env=None):
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{command} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def copy_sources(source: Path) -> Path:
    """The files the wheel is made of, copied to ``source``."""
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(
                ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        elif (ROOT / name).exists():  # LICENSE is new in issue 20: without it the wheel lacks it
            shutil.copy2(ROOT / name, source / name)
    return source


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """``(venv bin folder, wheel path, environment)`` of the wheel installed in a fresh venv."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = copy_sources(tmp / "source")
    wheels = tmp / "wheels"
    pip = [sys.executable, "-m", "pip"]
    run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", wheels, source], tmp)
    (wheel,) = wheels.glob("nnabla_dls-*.whl")
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", venv], tmp)
    python = venv / "bin" / "python"
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp))
    (Path(str(site).strip()) / "project_dependencies.pth").write_text(
        sysconfig.get_path("purelib") + "\n"
    )
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel], tmp)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["MPLBACKEND"] = "Agg"
    elsewhere = tmp / "elsewhere"  # outside the checkout
    elsewhere.mkdir()
    return venv / "bin", wheel, env, elsewhere


def test_the_wheel_carries_the_shipped_traces_and_no_tests(installed):
    _, wheel, _, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    data = Path("sim/traces/data")
    for model in MODELS:
        wanted = [trace_path(data, model, k) for k in RECORDINGS] + measured_paths(data, model)
        assert not [str(p) for p in wanted if str(p) not in names], names
    assert "sim/traces/data/README.md" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith("/LICENSE") for n in names)
    assert not [n for n in names if n.startswith(("tests/", "reports/", "benchmarks/"))]


def test_the_installed_package_imports_from_the_wheel_with_its_version(installed):
    bin_dir, _, env, elsewhere = installed
    code = (
        "import json, importlib.metadata as m, sim, updater\n"
        "meta = m.metadata('nnabla-dls')\n"
        "print(json.dumps({'files': [updater.__file__, sim.__file__], 'version': m.version("
        "'nnabla-dls'), 'ours': [updater.__version__, sim.__version__], 'license': "
        "meta.get('License-Expression') or meta.get('License'), 'classifiers': "
        "meta.get_all('Classifier'), 'description': meta.get_payload() or '', "
        "'type': meta.get('Description-Content-Type'), 'author': meta.get('Author')}))"
    )
    found = json.loads(run([bin_dir / "python", "-c", code], elsewhere, env))
    assert all(str(bin_dir.parent) in f for f in found["files"]), found["files"]
    assert found["ours"] == [found["version"], found["version"]]
    assert found["license"] == "MIT"
    assert found["author"] == "The nnabla-dls developers"  # issue 41: there was none
    assert "Programming Language :: Python :: 3.10" in found["classifiers"]
    assert "Operating System :: POSIX :: Linux" in found["classifiers"]
    assert found["description"].startswith("# nnabla-dls") and found["type"] == "text/markdown"


def test_dls_report_runs_from_any_folder(installed):
    bin_dir, _, env, elsewhere = installed
    out = run([bin_dir / "dls", "report", "--quick", "--out", "rep"], elsewhere, env)
    assert "wrote" in out
    text = (elsewhere / "rep" / "README.md").read_text()
    assert "digits_conv_bn" in text and '"real_traces": "shipped"' in text


@pytest.mark.parametrize("model", ["digits_conv_bn", "sequence_lstm"])
def test_dls_simulate_takes_a_shipped_trace_by_name(installed, model):
    bin_dir, _, env, elsewhere = installed
    out = run([bin_dir / "dls", "simulate", "--trace", model, "--runs", "2"], elsewhere, env)
    assert f"trace: {model} (" in out


def test_the_wheel_needs_the_sim_extra_for_plots_only_and_ships_its_type_marker(installed):
    bin_dir, wheel, env, elsewhere = installed
    code = "import importlib.metadata as m; print('\\n'.join(m.requires('nnabla-dls')))"
    requires = run([bin_dir / "python", "-c", code], elsewhere, env).splitlines()
    plain = sorted(r.replace(" ", "") for r in requires if "extra ==" not in r)
    assert plain == ["nnabla<2,>=1.33.0", "numpy<2,>=1.21"], requires  # issue 30: a range
    sim = sorted(r.split(";")[0].strip() for r in requires if 'extra == "sim"' in r)
    assert sim == ["matplotlib>=3.5", "tabulate>=0.9", "tqdm>=4.60"], requires
    assert "updater/py.typed" in zipfile.ZipFile(wheel).namelist()


def test_the_wheel_builds_without_a_warning(tmp_path):
    """Issue 52: the license as a TOML table and the license classifier printed pages of
    setuptools deprecation warnings at every install (setuptools >= 77)."""
    source = copy_sources(tmp_path / "source")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    proc = subprocess.run(
        [*command, "-w", tmp_path / "wheels", source], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    assert re.findall(r"\w*Warning: .*", proc.stdout + proc.stderr) == []
