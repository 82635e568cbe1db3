"""Python calls an ``update()`` makes inside ``updater/``, and the modules a recorded step crosses.

Counted with ``sys.setprofile``: every call of a Python function whose code is in the
``updater`` package, ``update()`` itself included, and of the methods Python generates for its
records (a dataclass's ``__init__``, a named tuple's ``__new__``) called from there; the data
feeder's own work left out (nnabla's
compiled calls and NumPy's are not Python calls and are not counted; nnabla's own updater makes
none of ours). Per ``update()``,
after three warm-up updates, on the 64-wide MLPs of :mod:`benchmarks.depth_models` in cpu:float
(6 and 202 parameter arrays) with ``finite_check="nnabla"`` and ``"auto"`` (which picks
"nnabla" for both on a CPU), steps applied. A recorded step: a 16-16-10 MLP in cpu:half with a
``GradientRecorder`` and ``Probes(overflow=True)`` (and with ``forward_headroom=True``), the
modules its ``update()`` enters and the hops between them (a call whose caller is in another
module of ``updater/``, or outside it). Issue 51's goals: at most 40 calls per ``update()``, at
most 15 modules crossed by a recorded step with overflow probes.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import depth_models
from benchmarks.common import Counted
from sim.tables import markdown_grid

CALL_GOAL, MODULE_GOAL = 40, 15
"""Issue 51's goals: calls per ``update()``, modules a recorded step with probes crosses."""
POLICY = "updater/policy/"
"""The modules of the policy (the state machine the simulator shares)."""
PATHS = ("nnabla", "auto")
"""The ``finite_check`` values counted."""


def calls_per_update(arrays: int, path: str, steps: int = 5, seed: int = 0) -> tuple:
    """``(calls, of them the policy's)``: Python calls inside ``updater/`` per ``update()`` of
    the MLP with ``arrays`` parameter arrays, with ``finite_check=path``."""
    import nnabla as nn
    from nnabla.ext_utils import get_extension_context

    from updater import DynamicLossScalingUpdater

    nn.set_default_context(get_extension_context("cpu", type_config="float"))
    nn.clear_parameters()
    solver, loss, feed = depth_models.mlp(arrays, np.random.default_rng(seed))
    counted = Counted()
    u = DynamicLossScalingUpdater(solver, loss, counted.feeder(feed), scale=8.0, finite_check=path)
    for _ in range(3):
        u.update()
    with counted:
        for _ in range(steps):
            assert u.update().update_applied
    policy = sum(n for module, n in counted.calls.items() if module.startswith(POLICY))
    return counted.total / steps, policy / steps


def recorded_step(forward_headroom: bool, seed: int = 0) -> dict:
    """What one recorded ``update()`` with overflow probes (and the forward headroom) enters:
    its calls, modules and hops inside ``updater/``, and the probe passes it ran."""
    import nnabla as nn
    from nnabla.ext_utils import get_extension_context

    from benchmarks.common import Model
    from updater import DynamicLossScalingUpdater, DynamicScale, GradientRecorder, Probes

    nn.set_default_context(get_extension_context("cpu", type_config="half"))
    nn.clear_parameters()
    m = Model("calls_recorded", 16, [16, 10], 8, np.random.default_rng(seed))
    counted = Counted()
    with tempfile.TemporaryDirectory() as folder:
        recorder = GradientRecorder(Path(folder) / "t.npz")
        u = DynamicLossScalingUpdater(
            m.solver,
            m.loss,
            counted.feeder(m.feed),
            policy=DynamicScale(init_scale=2.0**10),
            recorder=recorder,
            probes=Probes(overflow=True, forward_headroom=forward_headroom),
        )
        for _ in range(3):
            u.update()
        passes = recorder.probe_passes
        with counted:
            u.update()
        passes = recorder.probe_passes - passes
        recorder.close()
    return {
        "calls": counted.total,
        "modules": sorted(counted.calls),
        "hops": counted.hops,
        "passes": passes,
    }


def run(quick: bool = False) -> dict:
    """The counts (:func:`calls_per_update` on 6 and 202 arrays, :func:`recorded_step`)."""
    arrays = (6,) if quick else (6, 202)
    steps = 2 if quick else 5
    return {
        "updates": {(n, path): calls_per_update(n, path, steps) for n in arrays for path in PATHS},
        "recorded": {headroom: recorded_step(headroom) for headroom in (False, True)},
    }


def markdown(res: dict) -> str:
    """The counts as two tables, each against its goal."""
    rows = [
        [f"MLP, {n} arrays", f'"{path}"', f"{calls:.0f}", f"{policy:.0f}"]
        + ["met" if calls <= CALL_GOAL else "not met"]
        for (n, path), (calls, policy) in res["updates"].items()
    ]
    recorded = []
    for headroom, r in res["recorded"].items():
        probes = "overflow, forward_headroom" if headroom else "overflow"
        met = "met" if len(r["modules"]) <= MODULE_GOAL else "not met"
        row = [probes, str(r["calls"]), str(len(r["modules"])), met, str(r["hops"])]
        recorded.append(row + [str(r["passes"])])
    modules = ", ".join(f"`{m}`" for m in res["recorded"][False]["modules"])
    return "\n".join(
        [
            f"Python calls inside `updater/` per `update()` (goal: at most {CALL_GOAL}):",
            "",
            markdown_grid(
                ["model", "finite_check", "calls per update()", "of them the policy's", "goal"],
                rows,
            ),
            "",
            f"A recorded step with probes (goal: at most {MODULE_GOAL} modules with overflow "
            "probes):",
            "",
            markdown_grid(["Probes", "calls", "modules", "goal", "hops", "probe passes"], recorded),
            "",
            f"Modules a recorded step with overflow probes enters: {modules}.",
        ]
    )


def main(argv=None) -> None:
    """Print the counts as markdown (``--out FILE`` also writes them)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the small MLP only")
    parser.add_argument("--out", default=None, help="also write the markdown to this file")
    parser.add_argument(
        "--force", action="store_true", help="replace an --out file dls did not write"
    )
    args = parser.parse_args(argv)
    started = time.time()
    text = markdown(run(args.quick))
    print(text)
    if args.out is not None:
        from benchmarks.common import write_markdown

        command = "python -m benchmarks.bench_calls" + " --quick" * args.quick
        title = "Python calls per update"
        write_markdown(args.out, title, command, started, text, __doc__, force=args.force)


if __name__ == "__main__":
    main()
