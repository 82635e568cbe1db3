"""The architecture the folders show: every arrow runs sim -> updater, no import cycles between
modules or between packages, the NumPy layers never reach nnabla or the driver, nnabla only in
the library and in sim.nnabla_studies, no module over 400 lines (benchmarks, examples and tests
too)."""

import ast
import subprocess
import sys

import pytest

from tests.paths import ROOT

PACKAGES = ("updater", "sim")
NUMPY_LAYERS = ("updater.common", "updater.policy", "updater.trace")
"""The layers of updater that sim shares: NumPy only, below the nnabla side."""
NNABLA_SIDE = ("updater.driver", "updater.amp", "updater.runtime")


def module_files(packages=PACKAGES):
    """Module name -> path of every module of ``packages`` (folders under the root)."""
    found = {}
    for package in packages:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _absolute(node: ast.ImportFrom, name: str, path) -> str:
    """The absolute module an ``ImportFrom`` in module ``name`` (file ``path``) names."""
    if node.level == 0:
        return node.module or ""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imported_names(name: str, path) -> set:
    """Every module name ``path`` imports, at the top or inside functions, relative imports
    resolved: for ``from a import b``, both ``a`` and ``a.b``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, name, path)
            names.add(module)
            names.update(f"{module}.{a.name}" for a in node.names)
    return names


def import_graph(known) -> dict:
    """Module -> the modules of ``known`` it imports."""
    return {
        name: {n for n in imported_names(name, path) if n in known} - {name}
        for name, path in known.items()
    }


def package_of(module: str, known) -> str:
    """The node a module counts as in the package graph: its package (itself for a package's
    ``__init__``), or itself for a loose module beside subpackages (``sim/tables.py`` beside
    ``sim/replay/``), which belongs to none of them."""
    if known[module].name == "__init__.py":
        return module
    package = module.rsplit(".", 1)[0]
    beside = any(known[k].name == "__init__.py" for k in known if k.startswith(package + "."))
    return module if beside else package


def package_graph(graph: dict, known) -> dict:
    """The module ``graph`` seen by package (:func:`package_of`): node -> the nodes it imports.
    A package's arrows to its own subpackages are left out: a package imports its subpackages
    through its ``__init__`` (updater -> updater.driver); those are its public names, not a
    layer crossing."""
    packages = {}
    for name, deps in graph.items():
        package = package_of(name, known)
        packages.setdefault(package, set()).update(
            p for p in (package_of(d, known) for d in deps) if p != package
        )
    for deps in list(packages.values()):
        for dep in deps:
            packages.setdefault(dep, set())
    return {p: {d for d in deps if not d.startswith(p + ".")} for p, deps in packages.items()}


def find_cycle(graph: dict):
    """One cycle of ``graph`` as a list of nodes, or None."""
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for dep in sorted(graph[node]):
            if state.get(dep) == "open":
                return [*stack, node, dep]
            if dep not in state:
                found = visit(dep, [*stack, node])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


def assert_imports_leave_out(imports: str, forbidden) -> None:
    """Run ``imports`` in a fresh interpreter; no module named by ``forbidden`` (top-level
    packages or dotted prefixes) loads."""
    code = (
        "import sys\n"
        f"{imports}\n"
        f"forbidden = {tuple(forbidden)!r}\n"
        "bad = sorted(k for k in sys.modules if any(k == f or k.startswith(f + '.') "
        "for f in forbidden))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_relative_imports_are_seen():
    """The graph sees inside updater, whose imports are relative (the old test saw none)."""
    graph = import_graph(module_files())
    assert "updater.driver.checks" in graph["updater.driver.assembly"]
    assert "updater.common.validation" in graph["updater.policy.policies"]
    assert "updater.trace.format" in graph["updater.trace"]


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
    """Every arrow runs sim -> updater: no module of updater imports sim."""
    known = module_files()
    for name, deps in import_graph(known).items():
        if name.startswith("updater"):
            assert not any(n.startswith("sim") for n in deps), name


@pytest.mark.parametrize("layer", NUMPY_LAYERS)
def test_the_numpy_layers_never_reach_nnabla_or_the_driver(layer):
    """The NumPy layers import no nnabla and no module of the nnabla side, in the source (lazy
    imports included) and when imported."""
    for name, path in module_files().items():
        if name == layer or name.startswith(layer + "."):
            names = imported_names(name, path)
            assert not any(n.split(".")[0] in ("nnabla", "sim") for n in names), name
            assert not any(n.startswith(NNABLA_SIDE) for n in names), name
    assert_imports_leave_out(f"import {layer}", ["nnabla", "sim", *NNABLA_SIDE])


def test_only_the_nnabla_studies_name_nnabla_in_sim():
    """In sim, only sim.nnabla_studies writes an nnabla import (lazy ones included)."""
    for name, path in module_files(("sim",)).items():
        if not name.startswith("sim.nnabla_studies"):
            names = imported_names(name, path)
            assert not any(n.split(".")[0] == "nnabla" for n in names), name


def test_sim_reaches_the_nnabla_side_only_through_its_public_names():
    """sim (the nnabla studies included) imports the driver, the runtime and amp by their
    public names (``from updater import ...``, ``updater.amp``), never their modules
    (updater.driver.probes, ...)."""
    inside = tuple(f"{side}." for side in NNABLA_SIDE)
    for name, path in module_files(("sim",)).items():
        names = imported_names(name, path)
        assert not any(n.startswith(inside) for n in names), name


def test_no_import_cycles_between_modules():
    """The module import graph (lazy imports included) has no cycle."""
    assert find_cycle(import_graph(module_files())) is None


def test_no_import_cycles_between_packages():
    """Packages (updater.driver, sim.cli, ...) and the loose modules beside them (sim.tables)
    import each other without a cycle: a package's modules never import a package that imports
    it back."""
    known = module_files()
    assert find_cycle(package_graph(import_graph(known), known)) is None


def test_a_loose_module_is_its_own_node_in_the_package_graph():
    """A planted sim.tables -> sim.replay import (sim.replay.layers imports sim.tables) is a
    package cycle the test above fails on, though no module cycle; sim.tables used to count as
    the package sim, whose arrows into its subpackages are left out, and passed."""
    known = module_files()
    graph = import_graph(known)
    assert "sim.tables" in graph["sim.replay.layers"]
    graph["sim.tables"] = graph["sim.tables"] | {"sim.replay.run"}
    assert find_cycle(graph) is None  # no module imports itself back
    cycle = find_cycle(package_graph(graph, known))
    assert cycle is not None and {"sim.tables", "sim.replay"} <= set(cycle), cycle
    assert package_of("sim.tables", known) == "sim.tables"
    assert package_of("sim.argtypes", known) == "sim.argtypes"
    assert package_of("sim.replay.run", known) == "sim.replay"
    assert package_of("updater.common.npz", known) == "updater.common"


def test_find_cycle_finds_one():
    """The cycle finder the two tests above rely on reports a cycle when there is one."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_over_400_lines():
    """A module past 400 lines is split by job (see README, layout): the packages, the
    benchmarks, the examples and the tests."""
    files = {**module_files(), **module_files(("benchmarks", "examples", "tests"))}
    lengths = {name: len(path.read_text().splitlines()) for name, path in files.items()}
    assert not {name: n for name, n in lengths.items() if n > 400}


DATA_TABLES = ("updater/common/npz.py", "tests/updater/runtime/test_comm.py")
"""The files whose one ``# fmt: skip`` keeps a table of data in rows (a dict of file kinds; a
parametrize table)."""


def test_no_fmt_skip_packing():
    """The code is laid out by the formatter: no ``# fmt: skip`` but one per table of data
    (:data:`DATA_TABLES`); the 400-line rule then counts the formatter's lines."""
    roots = ("updater", "sim", "benchmarks", "examples", "tests")
    found = [
        f"{path.relative_to(ROOT)}:{i}"
        for root in roots
        for path in (ROOT / root).rglob("*.py")
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if line.rstrip().endswith("# fmt: skip")
    ]
    assert sorted(f.split(":")[0] for f in found) == sorted(DATA_TABLES), found


MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 8
NOT_SPLIT = "Not split: "
"""How a docstring gives the one-line reason a function stays over the limits."""


def oversized_functions(path) -> list:
    """The functions of ``path`` over :data:`MAX_FUNCTION_LINES` lines (its docstring not
    counted) or over :data:`MAX_PARAMETERS` parameters (``self`` not counted) whose docstring
    gives no :data:`NOT_SPLIT` reason."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = node.args
        names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
        count = len(names) + bool(a.vararg) + bool(a.kwarg) - (names[:1] in (["self"], ["cls"]))
        doc = ast.get_docstring(node, clean=False)
        lines = node.end_lineno - node.lineno + 1
        if doc is not None:
            lines -= node.body[0].end_lineno - node.body[0].lineno + 1
        too_big = lines > MAX_FUNCTION_LINES or count > MAX_PARAMETERS
        if too_big and NOT_SPLIT not in (doc or ""):
            found.append(f"{node.name} ({lines} lines, {count} parameters)")
    return found


@pytest.mark.parametrize("package", ["sim", "updater"])
def test_long_functions_are_split_or_say_why(package):
    """A function over 60 lines or 8 parameters is split by job or says why not in one line."""
    bad = {
        name: f
        for name, path in module_files((package,)).items()
        if (f := oversized_functions(path))
    }
    assert not bad


def test_the_size_check_catches_a_long_function_and_passes_a_reasoned_one(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))  # with def: 60
    path = tmp_path / "m.py"
    path.write_text(f'def f(a, b, c, d, e, f, g, h):\n    """Doc."""\n{body}')
    assert oversized_functions(path) == []  # at both limits
    path.write_text(f'def f(a):\n    """Doc."""\n{body}    x = 0\n')
    assert oversized_functions(path) == [f"f ({MAX_FUNCTION_LINES + 1} lines, 1 parameters)"]
    path.write_text("def f(a, b, c, d, e, f, g, h, i):\n    pass\n")
    assert oversized_functions(path) == ["f (2 lines, 9 parameters)"]
    path.write_text(
        f'def f(a):\n    """Doc.\n\n    {NOT_SPLIT}one loop.\n    """\n{body}    x = 0\n'
    )
    assert oversized_functions(path) == []
    path.write_text("class C:\n    def f(self, a, b, c, d, e, f, g, h):\n        pass\n")
    assert oversized_functions(path) == []  # self is not counted


def test_the_public_api_is_annotated_and_marked_typed():
    """Issue 30: type checkers read the package (``py.typed``) and its public signatures."""
    import inspect

    import updater
    from updater import DynamicLossScalingUpdater as U

    functions = [U.__init__, U.update, U.backward, U.unscale, U.step, U.get_scale]
    functions += [U.state_dict, U.load_state_dict, updater.save_checkpoint]
    functions += [updater.load_checkpoint, updater.GradientRecorder.__init__]
    functions += [updater.make_policy, updater.get_context, updater.SolverGroup.__init__]
    functions += [updater.export_parameters]
    for f in functions:
        signature = inspect.signature(f)
        bare = [p.name for p in signature.parameters.values() if p.name != "self"]
        bare = [n for n in bare if signature.parameters[n].annotation is inspect.Parameter.empty]
        assert not bare and signature.return_annotation is not inspect.Signature.empty, f
    assert (ROOT / "updater" / "py.typed").is_file()
