"""scripts/gpu_check.sh (issue 52), up to the GPU itself, which no machine here has: without a
GPU it stops at once with one line, having created nothing; the library folders of the
nvidia-*-cu12 wheels are found (and a missing library named); the pinned install resolves
against PyPI; the pins agree with the project's cuda extra. The GPU tests themselves are in
tests/gpu (skipped here)."""

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11: pytest's own dependency
    import tomli as tomllib

from tests.paths import ROOT

SCRIPT = ROOT / "scripts" / "gpu_check.sh"
REQUIREMENTS = ROOT / "scripts" / "gpu-requirements.txt"
NEEDED = ["libcudart.so.12", "libcublas.so.12", "libcusolver.so.11", "libcurand.so.10"]
NEEDED += ["libcufft.so.11", "libcudnn.so.8"]  # libnnabla_cuda-120_8.so's NEEDED, driver aside
WHEELS = {
    "cuda_runtime": "libcudart.so.12",
    "cublas": "libcublas.so.12",
    "cusolver": "libcusolver.so.11",
    "curand": "libcurand.so.10",
    "cufft": "libcufft.so.11",
    "cudnn": "libcudnn.so.8",
}


def pins() -> dict:
    lines = [x.split("#")[0].strip() for x in REQUIREMENTS.read_text().splitlines()]
    return dict(x.split("==") for x in lines if x)


def without_gpu(tmp_path, smi: str = None) -> dict:
    """An environment whose PATH has no nvidia-smi, or a stand-in printing ``smi``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("grep", "head", "dirname", "python3"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    if smi is not None:
        (bin_dir / "nvidia-smi").write_text(f"#!/bin/bash\n{smi}\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    return {**os.environ, "PATH": str(bin_dir)}


@pytest.mark.parametrize(
    "smi",
    [None, "echo 'NVIDIA-SMI has failed: no driver' >&2; exit 9", "exit 0"],
    ids=["no nvidia-smi", "no driver", "no GPU listed"],
)
def test_without_a_gpu_it_stops_at_once_with_one_line_and_creates_nothing(tmp_path, smi):
    before = sorted(p.name for p in ROOT.iterdir())
    start = time.monotonic()
    proc = subprocess.run(
        [shutil.which("bash"), SCRIPT],
        cwd=tmp_path,
        env=without_gpu(tmp_path, smi),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert time.monotonic() - start < 5
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        "gpu_check.sh: no NVIDIA GPU here (nvidia-smi lists none): nothing installed, nothing run\n"
    )
    assert sorted(p.name for p in ROOT.iterdir()) == before


def fake_wheels(site: Path, left_out=()) -> list:
    """The nvidia-*-cu12 wheels' layout (site/nvidia/<part>/lib/<library>), empty files."""
    folders = []
    for part, library in WHEELS.items():
        folder = site / "nvidia" / part / "lib"
        folder.mkdir(parents=True)
        if library not in left_out:
            (folder / library).touch()
        folders.append(str(folder))
    return sorted(folders)


def library_path(site: Path):
    env = {**os.environ, "PYTHONPATH": str(site), "DLS_PYTHON": sys.executable}
    return subprocess.run(
        ["bash", SCRIPT, "--library-path"], env=env, capture_output=True, text=True, timeout=60
    )


def test_the_library_folders_of_the_cuda_wheels_are_found(tmp_path):
    folders = fake_wheels(tmp_path)
    proc = library_path(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().split(":") == folders
    assert sorted(WHEELS.values()) == sorted(NEEDED)


def test_a_missing_library_is_named_with_the_install_to_run(tmp_path):
    fake_wheels(tmp_path, left_out=["libcudnn.so.8"])
    proc = library_path(tmp_path)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("gpu_check.sh: libcudnn.so.8 not found in the nvidia-*-cu12")
    assert proc.stderr.rstrip().endswith("pip install -r scripts/gpu-requirements.txt")


def test_the_pins_agree_with_the_cuda_extra_and_nnabla_1_39_with_cudnn_8():
    from packaging.requirements import Requirement

    found = pins()
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (cuda,) = [Requirement(r) for r in extra["optional-dependencies"]["cuda"]]
    assert found["nnabla-ext-cuda120"] in cuda.specifier
    assert found["nnabla"] == found["nnabla-ext-cuda120"] == "1.39.0"  # the extension pins it
    assert found["nvidia-cudnn-cu12"].startswith("8.")
    assert {f"nvidia-{part.replace('_', '-')}-cu12" for part in WHEELS} <= set(found)


def pypi_reachable() -> bool:
    try:
        urllib.request.urlopen("https://pypi.org/simple/nnabla/", timeout=5).close()
    except OSError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not pypi_reachable(), reason="needs PyPI (https://pypi.org)")
def test_the_pinned_install_resolves_against_pypi_for_a_linux_gpu_machine(tmp_path):
    """``pip install --dry-run`` for CPython 3.10 on manylinux x86_64 (the wheels' tags):
    every pin and its dependencies resolve (pip downloads the wheels to read them: about
    40 s and 1.5 GB the first time)."""
    platforms = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
    command += ["--only-binary=:all:", "--python-version", "3.10", "--target", tmp_path / "t"]
    command += [arg for p in platforms + ["manylinux1_x86_64"] for arg in ("--platform", p)]
    command += ["--report", tmp_path / "report.json", "-r", REQUIREMENTS]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    chosen = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in report["install"]}
    assert {k.lower(): v for k, v in pins().items()}.items() <= chosen.items()
