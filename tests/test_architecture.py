"""The architecture the folders show: every arrow runs sim -> updater, no import cycles between
modules or between packages, the NumPy layers never reach nnabla or the driver, nnabla only in
the library and in sim.nnabla_studies, sim never naming the driver, the driver in layers
(:data:`DRIVER_LAYERS`). The layout of the code (sizes, the formatter, ruff's complexity rules)
is tests/test_layout.py's."""

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


SIM_REFUSED = ("updater.driver", "updater.runtime")
"""What sim never imports, the packages themselves included (``from updater import driver``)."""
SIM_PUBLIC = ("updater.amp",)
"""What sim imports by its public name only, never a module inside."""


def sim_reaches_inside(names) -> list:
    """The imported ``names`` (:func:`imported_names` of a module of sim) that reach the nnabla
    side past its public names: :data:`SIM_REFUSED` or a module in it, a module inside
    :data:`SIM_PUBLIC`."""
    inside = tuple(f"{p}." for p in (*SIM_REFUSED, *SIM_PUBLIC))
    return sorted(n for n in names if n in SIM_REFUSED or n.startswith(inside))


def test_sim_reaches_the_nnabla_side_only_through_its_public_names():
    """sim (the nnabla studies included) imports the driver and the runtime by their public
    names (``from updater import DynamicLossScalingUpdater``) and amp as ``updater.amp``, never
    their modules (``updater.driver.recording.probes``) nor the packages themselves."""
    for name, path in module_files(("sim",)).items():
        assert not sim_reaches_inside(imported_names(name, path)), name


@pytest.mark.parametrize(
    ("source", "refused"),
    [
        ("from updater import driver", ["updater.driver"]),
        ("import updater.driver", ["updater.driver"]),
        ("from updater.driver import updater", ["updater.driver", "updater.driver.updater"]),
        ("from updater import runtime", ["updater.runtime"]),
        ("from updater.amp import rewrite", ["updater.amp.rewrite"]),
        ("from updater import amp, DynamicLossScalingUpdater, Probes", []),
        ("import updater.amp\nfrom updater.trace import Trace", []),
    ],
)
def test_the_sim_check_refuses_a_planted_import(tmp_path, source, refused):
    """``from updater import driver`` names ``updater.driver``, which the older check (modules
    inside the driver only) let through."""
    path = tmp_path / "planted.py"
    path.write_text(source + "\n")
    assert sim_reaches_inside(imported_names("sim.planted", path)) == refused


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


DRIVER = "updater.driver"
DRIVER_LAYERS = (
    ("arrays", "flat", "function_roles", "records", "solver_group", "value_ranges"),
    ("checks",),
    ("arguments", "options", "probe_options"),
    ("rounds", "forward_state", "gradient_work", "outside_forward"),
    ("recording",),
    ("attempts",),
    ("assembly",),
    ("updater", "attributes", "call_order", "saved_state"),
)
"""The driver's layers, bottom up, by module or subpackage (``checks`` is every module of
``updater/driver/checks/``): a module imports only from its own layer or below.

1. nnabla's facts and the records: arrays and their reads, concatenations, what each function
   does with its inputs (and the values each input may hold), the step's records, the solver
   group; they know nothing of a step.
2. ``checks``: one finite-check path per module, on the arrays.
3. The options: what the user passes, checked (the options record, the scale and policy
   arguments, the option ``probes``). Above ``checks`` because ``finite_check`` takes the names
   of its paths (:data:`updater.driver.checks.PATHS`), below every mechanism it configures: each
   reads the live record at use, none is imported by it (the option ``probes`` was
   ``recording/options.py``, which made the record import the recording package).
4. The step's mechanisms: the rounds, the forward state, the gradient work, the watch on a
   forward of the user's own.
5. ``recording``: the recorder's hook and probes, which run the rounds again.
6. ``attempts``: an iteration's attempts and verdict, over the mechanisms and the hook.
7. ``assembly``: the collaborators built from the options.
8. The updater: the class, its attributes, its staged calls' order and its saved state.

The reviewers' order (issue 51) with the options placed, and the modules it did not name put
where what they import and what imports them allow."""


def driver_layer(module: str, layers=DRIVER_LAYERS):
    """The index in ``layers`` of a module of the driver, None for one in no layer (the
    driver's ``__init__`` is below all: it imports nothing)."""
    if module == DRIVER:
        return -1
    room = module[len(DRIVER) + 1 :].split(".")[0]
    return next((i for i, rooms in enumerate(layers) if room in rooms), None)


def layer_violations(graph: dict, layers=DRIVER_LAYERS) -> list:
    """``"a -> b"`` for each import of the driver's module ``a`` from a higher layer ``b`` of
    ``layers``, and ``"a: no layer"`` for a module of the driver they do not place."""
    found = []
    for name, deps in sorted(graph.items()):
        if name != DRIVER and not name.startswith(DRIVER + "."):
            continue
        own = driver_layer(name, layers)
        if own is None:
            found.append(f"{name}: no layer")
            continue
        inside = (d for d in sorted(deps) if d.startswith(DRIVER + "."))
        found += [f"{name} -> {d}" for d in inside if (driver_layer(d, layers) or 0) > own]
    return found


def checks_reading_the_recording(graph: dict) -> list:
    """The modules of ``checks`` that import the recording: the checks answer what the path
    read; the recording asks them, never the other way."""
    checks, recording = f"{DRIVER}.checks", f"{DRIVER}.recording"
    return sorted(
        name
        for name, deps in graph.items()
        if name.startswith(checks) and any(d.startswith(recording) for d in deps)
    )


def test_the_driver_imports_only_its_own_layer_or_below():
    """Every module of the driver has a layer and imports nothing above it (lazy imports and
    ``TYPE_CHECKING`` ones included); no check reads the recording."""
    graph = import_graph(module_files())
    assert layer_violations(graph) == []
    assert checks_reading_the_recording(graph) == []


def planted(name: str, source: str, tmp_path) -> dict:
    """The import graph with the module ``name`` added, whose source is ``source`` (relative
    imports resolved from ``name``)."""
    path = tmp_path / "planted.py"
    path.write_text(source + "\n")
    known = module_files()
    added = {n for n in imported_names(name, path) if n in known} - {name}
    return {**import_graph(known), name: added}


@pytest.mark.parametrize(
    ("room", "layer", "source", "refused"),
    [  # a check reading the recording, the options importing what they configure, ...
        ("checks.planted", None, "from ..recording.hook import Recording", "recording.hook"),
        ("checks.planted", None, "from .. import recording", "recording"),
        ("options_two", 2, "from .recording import Recording", "recording"),
        ("rounds_two", 3, "from .attempts import Pending", "attempts"),
        ("rounds_two", 3, "from .checks import PATHS\nfrom .options import OPTIONS", None),
    ],
)
def test_the_layer_check_refuses_a_planted_upward_import(tmp_path, room, layer, source, refused):
    """A module planted in a layer (``layer``: a new room added to that layer) that imports from
    a higher one is refused, one that imports from its own or lower ones is not; a module in
    no layer is refused."""
    layers = [list(rooms) for rooms in DRIVER_LAYERS]
    if layer is not None:
        layers[layer].append(room)
    module = f"{DRIVER}.{room}"
    graph = planted(module, source, tmp_path)
    found = layer_violations(graph, tuple(tuple(rooms) for rooms in layers))
    assert found == ([] if refused is None else [f"{module} -> {DRIVER}.{refused}"])
    if layer is not None:  # a room the declared layers do not name
        assert layer_violations(graph) == [f"{module}: no layer"]
    reads = checks_reading_the_recording(graph)
    assert reads == ([module] if room.startswith("checks.") else [])


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
