"""The architecture the folders show: every arrow runs sim -> updater, no import cycles, nnabla
only in the library and in sim.nnabla_studies, no module over 400 lines."""

import ast
import subprocess
import sys

from tests.paths import ROOT

PACKAGES = ("updater", "sim")


def module_files():
    """Module name -> path of every module of the two packages."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_modules(path, known):
    """The modules of ``known`` that ``path`` imports, at the top or inside functions."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return {n for n in names if n in known}


def assert_imports_leave_out(imports: str, forbidden) -> None:
    """Run ``imports`` in a fresh interpreter; no top-level package in ``forbidden`` loads."""
    code = (
        "import sys\n"
        f"{imports}\n"
        f"bad = sorted(k for k in sys.modules if k.split('.')[0] in {tuple(forbidden)!r})\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_policy_and_sim_import_without_nnabla():
    """Everything in sim but the nnabla studies, and the policies, import without nnabla."""
    assert_imports_leave_out(
        "import importlib, pkgutil, sim, updater, updater.policy\n"
        "from updater import DynamicScale, HeadroomScale\n"
        "for m in pkgutil.walk_packages(sim.__path__, 'sim.'):\n"
        "    if not m.name.startswith('sim.nnabla_studies'):\n"
        "        importlib.import_module(m.name)",
        ["nnabla"],
    )


def test_the_library_never_imports_the_testbed():
    """Every arrow runs sim -> updater: no module of updater imports sim, and the NumPy-only
    modules (policies, trace format, checks, float16 facts, files) import without nnabla."""
    known = module_files()
    for name, path in known.items():
        if name.startswith("updater"):
            assert not any(n.startswith("sim") for n in imported_modules(path, known)), name
    assert_imports_leave_out(
        "import updater.policy, updater.trace, updater.common",
        ["nnabla", "sim"],
    )


def test_only_the_nnabla_studies_name_nnabla_in_sim():
    """In sim, only sim.nnabla_studies writes an nnabla import (lazy ones included)."""
    for name, path in module_files().items():
        if name.startswith("sim") and not name.startswith("sim.nnabla_studies"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module or ""]
                else:
                    continue
                assert not any(n.split(".")[0] == "nnabla" for n in names), name


def test_no_import_cycles():
    """The module import graph (lazy imports included) has no cycle."""
    known = module_files()
    graph = {name: imported_modules(path, known) - {name} for name, path in known.items()}
    state = {}

    def visit(name, stack):
        state[name] = "open"
        for dep in sorted(graph[name]):
            assert state.get(dep) != "open", " -> ".join([*stack, name, dep])
            if dep not in state:
                visit(dep, [*stack, name])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])


def test_no_module_over_400_lines():
    """A module past 400 lines is split by job (see README, layout)."""
    lengths = {name: len(path.read_text().splitlines()) for name, path in module_files().items()}
    assert not {name: n for name, n in lengths.items() if n > 400}
