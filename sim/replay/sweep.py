"""Grid sweeps: every combination of some settings of one policy, run on several traces.

:func:`grid_points` expands a grid; :func:`run_sweep` runs one policy per grid point on each
trace and returns one summary row per (trace, grid point). ``dls sweep`` and the report's
default-setting sweeps both use them.
"""

from __future__ import annotations

import itertools
from typing import Any, Dict, Iterable, List, Mapping, Sequence

from sim.replay.pool import simulate_pooled
from updater.trace import Trace


def grid_points(grid: Mapping[str, Sequence]) -> List[Dict[str, Any]]:
    """Every combination of the grid's values, the last setting varying fastest.

    Args:
        grid (mapping setting name -> sequence of values): the values of each swept setting.

    >>> grid_points({"a": (1, 2), "b": ("x", "y")})
    [{'a': 1, 'b': 'x'}, {'a': 1, 'b': 'y'}, {'a': 2, 'b': 'x'}, {'a': 2, 'b': 'y'}]
    """
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*grid.values())]


def run_sweep(
    policies: Sequence,
    points: Sequence[Mapping[str, Any]],
    traces: Iterable[Trace],
    runs: int,
    seed: int,
    jitter: float,
    progress=None,
    stage: str = "{trace}: {settings} settings x {runs} runs x {steps} steps",
) -> List[Dict[str, Any]]:
    """Run ``policies[i]`` (made from grid point ``points[i]``) on every trace.

    All policies run together on one trace (:func:`sim.replay.run.simulate_many`, common random
    numbers), one trace after the other; a generator of traces is drawn one trace at a time, so
    only one trace is held in memory.

    Args:
        policies (sequence of policies): one per grid point.
        points (sequence of dicts): the swept settings of each policy (from :func:`grid_points`).
        traces (iterable of Trace or TracePool): the traces, each run in turn; a
            :class:`sim.replay.pool.TracePool` draws its runs across its recordings.
        runs (int), seed (int), jitter (float): as in :func:`sim.replay.run.simulate_many`.
        progress (optional): as in :func:`sim.replay.run.simulate_many`; a stage reporter (with
            ``stage(name)``) is told one stage per trace.
        stage (str): the stage name, formatted with ``trace``, ``settings`` (how many),
            ``runs``, ``steps`` and ``jitter``.

    Returns:
        list of dicts, trace by trace and in grid order within a trace: the grid point's
        settings followed by :meth:`sim.replay.result.RunResult.summary` (whose ``label`` is
        the grid point's index; :func:`labelled` gives the rows another).
    """
    if len(policies) != len(points):
        raise ValueError(
            f"points must hold one grid point per policy ({len(policies)}), got {len(points)}"
        )
    tell = getattr(progress, "stage", None)
    rows: List[Dict[str, Any]] = []
    for trace in traces:
        if tell is not None:
            what = dict(trace=trace.name, settings=len(policies), runs=runs, jitter=jitter)
            tell(stage.format(steps=trace.training_steps, **what))
        results = simulate_pooled(
            policies,
            trace,
            runs=runs,
            seed=seed,
            jitter=jitter,
            labels=[str(i) for i in range(len(policies))],
            progress=progress,
        )
        rows += [{**point, **result.summary()} for point, result in zip(points, results)]
        del trace, results  # a lazily made next trace need not share memory with this one
    return rows


def labelled(rows: List[Dict[str, Any]], label: str) -> List[Dict[str, Any]]:
    """The :func:`run_sweep` ``rows`` with ``label`` as their ``label`` (in its place)."""
    return [{**row, "label": label} for row in rows]


def sweep_grid(
    make,
    grid: Mapping[str, Sequence],
    traces: Mapping[str, Trace],
    runs: int,
    seed: int,
    jitter: float,
    progress=None,
    stage: str = "{name} sweep on {{trace}} ({{settings}} settings, jitter {{jitter:g}})",
) -> List[Dict[str, Any]]:
    """Every combination of ``grid`` (settings of the policy class ``make``) on every trace:
    :func:`run_sweep` rows, one per trace and combination; ``stage`` names each stage, with
    ``{name}`` the class's name (the rest as in :func:`run_sweep`)."""
    points = grid_points(grid)
    return run_sweep(
        [make(**p) for p in points],
        points,
        traces.values(),
        runs=runs,
        seed=seed,
        jitter=jitter,
        progress=progress,
        stage=stage.format(name=make.__name__),
    )
