"""The simulator's predictions from recorded traces, checked against real runs.

For each real model, :mod:`sim.nnabla_studies.real_traces` records traces under the default
policy in several batch orders (:data:`sim.traces.real.RECORDINGS`) and trains it again for real
under each of :data:`sim.replay.measured.CHECKED_POLICIES` in batch orders no recording used
(:data:`sim.traces.real.CHECK_ORDERS`; :class:`sim.replay.measured.MeasuredRun`).
:func:`prediction_rows` replays the recordings, pooled (:class:`sim.replay.pool.TracePool`),
under those policies and puts each prediction next to the measured value, with the calibrated
interval ``dls simulate`` and ``dls tune`` print (:func:`sim.replay.intervals.replay_intervals`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Union

import numpy as np

from sim.replay.intervals import INTERVAL_METRICS, replay_intervals
from sim.replay.measured import CHECKED_POLICIES, MeasuredRun, run_path
from sim.replay.pool import TracePool
from sim.replay.run import simulate
from sim.replay.spread import LEVEL
from sim.traces.real import CHECK_ORDERS
from updater.common.names import shown
from updater.trace import Trace

PREDICTED = ("skipped", "below_half_safe", "mean_flushed")
"""The metrics compared (names of :data:`sim.replay.metrics.METRICS`); those of
:data:`sim.replay.intervals.INTERVAL_METRICS` with their interval."""


def prediction_rows(
    traces: Mapping[str, Union[Trace, TracePool]],
    runs_dir: Union[str, Path],
    seed: int = 0,
    orders: Sequence[int] = CHECK_ORDERS,
) -> List[Dict[str, Any]]:
    """One row per (model, checked policy, batch order of the real run, metric): predicted and
    measured values.

    Args:
        traces (mapping model -> Trace or TracePool): the recordings of each model (every step
            recorded).
        runs_dir (str or Path): where the measured runs are
            (:func:`sim.replay.measured.run_path`).
        seed (int, default 0): seed of the intervals' bootstrap, >= 0.
        orders (sequence of int): the batch orders of the measured runs
            (default :data:`sim.traces.real.CHECK_ORDERS`).

    Returns:
        list of dict: ``model``, ``policy``, ``order`` (of the real run), ``metric``,
        ``predicted`` (the mean of the recordings' exact replays), ``each`` (each recording's
        exact replay), ``low``, ``high`` and ``level`` (the calibrated interval of
        :func:`sim.replay.intervals.replay_intervals` from all the recordings; None for a metric
        without one), ``alone`` (the same interval from each recording alone, as (low, high)),
        ``measured``, ``error`` (predicted - measured), ``stick`` (what the measured safe scale
        knows of overflows: :attr:`sim.replay.measured.MeasuredRun.stick`).

    Raises:
        TypeError: ``traces`` is not a mapping (the call before models were named).
        ValueError: a measured run is missing or its step count differs from the traces'.
    """
    if not isinstance(traces, Mapping):
        raise TypeError(
            "traces must be a mapping of model name -> Trace or TracePool, got "
            f"{type(traces).__name__}: call prediction_rows({{name: TracePool([...])}}, runs_dir, "
            "orders=(...))"
        )
    rows = []
    for model, pool in traces.items():
        for label, policy in CHECKED_POLICIES.items():
            predicted = _predicted(policy, pool, seed)
            for order in orders:
                run = _measured_run(runs_dir, model, label, order, pool.training_steps)
                measured = run.metrics()
                for metric, p in predicted.items():
                    rows.append(
                        {
                            "model": model,
                            "policy": label,
                            "order": order,
                            "metric": metric,
                            **p,
                            "measured": measured[metric],
                            "error": p["predicted"] - measured[metric],
                            "stick": run.stick,
                        }
                    )
    return rows


def _predicted(policy, pool: Union[Trace, TracePool], seed: int) -> Dict[str, Dict[str, Any]]:
    """Per metric of :data:`PREDICTED`, what :func:`prediction_rows` predicts for ``policy``
    from ``pool``: ``predicted``, ``each``, ``low``, ``high``, ``level`` and ``alone``."""
    recordings = pool.traces if isinstance(pool, TracePool) else [pool]
    pooled = replay_intervals(policy, pool, seed=seed)
    alone = [replay_intervals(policy, t, seed=seed) for t in recordings]
    out = {}
    for metric in PREDICTED:
        if metric in INTERVAL_METRICS:
            iv = pooled[metric]
            each = iv["each"]
            bounds = {"low": iv["low"], "high": iv["high"], "level": iv["level"]}
            bounds["alone"] = [(a[metric]["low"], a[metric]["high"]) for a in alone]
        else:
            exact = [simulate(policy, t, runs=1, jitter=0.0).metrics for t in recordings]
            each = [float(m[metric][0]) for m in exact]
            bounds = {"low": None, "high": None, "level": None, "alone": None}
        out[metric] = {"predicted": float(np.mean(each)), "each": each, **bounds}
    return out


def _measured_run(runs_dir, model: str, label: str, order: int, steps: int) -> MeasuredRun:
    """The measured run of ``model`` under ``label`` in batch order ``order``, of ``steps``
    steps, or a ValueError saying how to record it."""
    path = run_path(runs_dir, model, label, order)
    if not path.exists():
        found = _orders_saved(runs_dir, model, label)
        if found:  # the call from before checked runs had their own batch order
            raise ValueError(
                f"no measured run {shown(path)}: {shown(runs_dir)} has {model}'s {label} run in "
                f"batch order(s) {', '.join(map(str, found))}: call "
                f"prediction_rows(..., orders={tuple(found)})"
            )
        raise ValueError(
            f"no measured run {shown(path)}: save a sim.replay.measured.MeasuredRun of {model} "
            f"under {label} in batch order {order} there (for the shipped models python -m "
            "sim.nnabla_studies.real_traces makes them all)"
        )
    run = MeasuredRun.load(path)
    if run.steps != steps:
        raise ValueError(
            f"{shown(path)} has {run.steps} steps but the trace {model} has {steps}: "
            "record both with the same python -m sim.nnabla_studies.real_traces run"
        )
    return run


def _orders_saved(runs_dir, model: str, label: str) -> List[int]:
    """The batch orders of the measured runs of ``model`` under ``label`` in ``runs_dir``."""
    name = re.compile(rf"{re.escape(model)}(?:\.order(\d+))?\.{re.escape(label)}\.run\.npz")
    found = [name.fullmatch(p.name) for p in Path(runs_dir).glob("*.run.npz")]
    return sorted(int(m.group(1) or 0) for m in found if m)


GOALS = {
    "skipped": f"the measured skipped steps lie inside the predicted {LEVEL:.0%} interval in at "
    f"least {LEVEL:.0%} of the runs",
    "below_half_safe": "steps below half the safe scale: mean |predicted - measured| <= 5 points",
    "mean_flushed": "flushed share within 25% (relative) or 0.01 points of the measured value in "
    "at least 75% of the runs",
}
"""The goals the predictions are held to, per metric (issue 19: over 8 runs then, 6 of 8 for the
flushed share)."""


def flushed_within(error: float, measured: float) -> bool:
    """Whether a flushed share ``error`` away from ``measured`` meets the goal of
    :data:`GOALS`: within 25% of it (relative) or 0.01 points (1e-4).

    >>> flushed_within(0.2, 1.0), flushed_within(-5e-5, 0.0), flushed_within(0.3, 1.0)
    (True, True, False)
    """
    return abs(error) <= max(0.25 * measured, 1e-4)


def prediction_goals(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Each goal of :data:`GOALS` checked on :func:`prediction_rows` output.

    Returns:
        list of dict: ``metric``, ``goal`` (words), ``result`` (words, with the numbers),
        ``met`` (bool) and ``misses`` (the runs that miss: ``model``, ``policy``, ``order`` and
        by how much, in words).
    """
    out = []
    for metric, goal in GOALS.items():
        sub = [r for r in rows if r["metric"] == metric]
        if not sub:
            continue
        if metric == "skipped":
            ok = [r["low"] <= r["measured"] <= r["high"] for r in sub]
            gaps = [max(r["low"] - r["measured"], r["measured"] - r["high"]) for r in sub]
            result = f"inside in {sum(ok)} of {len(sub)}"
            met = sum(ok) >= math.ceil(LEVEL * len(sub) - 1e-9)
            how = [
                f"measured {r['measured']:g}, interval {r['low']:g}-{r['high']:g} "
                f"(outside by {g:g})"
                for r, g in zip(sub, gaps)
            ]
        elif metric == "below_half_safe":
            mean = float(np.mean([abs(r["error"]) for r in sub]))
            ok = [abs(r["error"]) <= 0.05 for r in sub]
            result = f"mean |error| {100 * mean:.1f} points"
            met = mean <= 0.05
            how = [f"error {100 * r['error']:+.1f} points" for r in sub]
        else:
            ok = [flushed_within(r["error"], r["measured"]) for r in sub]
            result = f"within in {sum(ok)} of {len(sub)}"
            met = sum(ok) >= 0.75 * len(sub)
            how = [
                f"predicted {100 * r['predicted']:.3g}%, measured {100 * r['measured']:.3g}%"
                for r in sub
            ]
        misses = [
            {"model": r["model"], "policy": r["policy"], "order": r["order"], "by": h}
            for r, good, h in zip(sub, ok, how)
            if not good
        ]
        out.append({"metric": metric, "goal": goal, "result": result, "met": met, "misses": misses})
    return out


def recordings_compared(rows: List[Dict[str, Any]], metric: str = "skipped") -> List[Dict]:
    """How many recordings the predicted ``metric`` needs: over the :func:`prediction_rows` of
    ``metric``, the calibrated interval from each recording alone and from all of them, each
    with how many real runs it held and its mean width.

    Returns:
        list of dict: ``spread`` (words), ``recordings``, ``level``, ``inside`` (real runs
        inside), ``runs``, ``width`` (mean high - low) and ``apart`` (mean over rows of the
        largest minus the smallest exact replay of the recordings; the same in every row).
    """
    sub = [r for r in rows if r["metric"] == metric and r["level"] is not None]
    if not sub:
        return []
    n = len(sub[0]["each"])
    apart = float(np.mean([max(r["each"]) - min(r["each"]) for r in sub]))
    spreads = [(f"recording {k} alone", 1, [r["alone"][k] for r in sub]) for k in range(n)]
    if n > 1:
        spreads.append((f"{n} recordings", n, [(r["low"], r["high"]) for r in sub]))
    return [
        {
            "spread": words,
            "recordings": k,
            "level": sub[0]["level"],
            "inside": sum(lo <= r["measured"] <= hi for r, (lo, hi) in zip(sub, bounds)),
            "runs": len(sub),
            "width": float(np.mean([hi - lo for lo, hi in bounds])),
            "apart": apart,
        }
        for words, k, bounds in spreads
    ]
