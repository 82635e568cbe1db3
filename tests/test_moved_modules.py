"""Module paths that moved still import (``updater.MOVED``, ``sim.MOVED``): the first import of
an old path warns DeprecationWarning once, naming the new path, and gives the new module."""

import subprocess
import sys

import pytest

CHECK = """
import importlib, sys, warnings
import {package}
for old, new in sorted({package}.MOVED.items()):  # a parent path (sim.fp16) before its children
    with warnings.catch_warnings(record=True) as first:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        importlib.import_module(old)
        exec(f"import {{old}}")
    assert module is sys.modules[new] is importlib.import_module(new), old
    said = [str(w.message) for w in first if issubclass(w.category, DeprecationWarning)]
    told = f"{{old}} moved to {{new}}; import {{new}} (the old path will be removed)"
    assert said == [told], said
    assert not again, [str(w.message) for w in again]
print(len({package}.MOVED))
"""


def _python_out(code: str) -> str:
    """The standard output of ``code`` run by a fresh interpreter (nothing imported yet, so each
    first import is really the first), which must succeed."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("package", ["updater", "sim"])
def test_old_paths_import_the_new_module_and_warn_once(package):
    assert int(_python_out(CHECK.format(package=package)).split()[-1]) >= 15


def test_the_warning_points_at_the_importing_line(tmp_path):
    script = tmp_path / "user.py"
    script.write_text("import updater.comm\nfrom updater.presets import PRESETS\n")
    proc = subprocess.run(
        [sys.executable, "-W", "default::DeprecationWarning", str(script)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"{script}:1: DeprecationWarning: updater.comm moved to updater.runtime.comm" in (
        proc.stderr
    )
    assert f"{script}:2: DeprecationWarning: updater.presets moved to updater.policy.presets" in (
        proc.stderr
    )


def test_new_paths_and_unknown_paths_are_left_alone():
    code = (
        "import warnings\n"
        "warnings.simplefilter('error')\n"
        "import updater.runtime.comm, updater.policy.presets, sim.casting.counts\n"
        "try:\n"
        "    import updater.no_such_module\n"
        "except ModuleNotFoundError as e:\n"
        "    print(e.name)\n"
    )
    assert _python_out(code).strip() == "updater.no_such_module"


UNRELATED = """
import importlib, sys
import updater, sim, updater.common.moved as moved
calls = []
def count(frame, event, arg):
    if event == "call" and frame.f_code.co_filename == moved.__file__:
        calls.append(frame.f_code.co_name)
sys.setprofile(count)
for name in ("nnabla.nnabla_ext", "no_such_top_module", "json.no_such"):
    try:
        importlib.import_module(name)  # nnabla tries the first on every step
    except ImportError:
        pass
sys.setprofile(None)
print(calls)
"""


def test_an_unrelated_import_never_asks_the_aliases():
    # the aliases are no import finder of the interpreter (sys.meta_path): a missing module
    # outside updater and sim is looked for without one Python call of theirs
    assert _python_out(UNRELATED).strip() == "[]"


def test_old_paths_import_after_the_import_caches_are_cleared():
    code = (
        "import importlib, sys, warnings\n"
        "import updater\n"
        "sys.path_importer_cache.clear()\n"
        "importlib.invalidate_caches()\n"
        "with warnings.catch_warnings(record=True) as said:\n"
        "    warnings.simplefilter('always')\n"
        "    import updater.driver.probes\n"
        "import updater.driver.recording.probes as new\n"
        "assert updater.driver.probes is new, updater.driver.probes\n"
        "print(len(said))\n"
    )
    assert _python_out(code).strip() == "1"
