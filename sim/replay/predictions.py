"""The simulator's predictions from recorded traces, checked against real runs.

For each real model, :mod:`sim.nnabla_studies.real_traces` records traces under the default
policy in several batch orders (:data:`sim.traces.real.RECORDINGS`) and trains it again for real
under each of :data:`sim.replay.measured.CHECKED_POLICIES` in batch orders no recording used
(:data:`sim.traces.real.CHECK_ORDERS`; :class:`sim.replay.measured.MeasuredRun`).
:func:`prediction_rows` replays the recordings, pooled (:class:`sim.replay.pool.TracePool`),
under those policies and puts each prediction next to the measured value, with its predictive
spread (:mod:`sim.replay.spread`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Union

import numpy as np

from sim.replay.measured import CHECKED_POLICIES, MeasuredRun, run_path
from sim.replay.metrics import METRICS
from sim.replay.pool import TracePool, simulate_pooled
from sim.replay.run import simulate
from sim.replay.spread import LEVEL, interval_half_width, predictive_spread
from sim.traces.real import CHECK_ORDERS
from updater.common.names import shown
from updater.trace import Trace

PREDICTED = ("skipped", "below_half_safe", "mean_flushed")
"""The metrics compared (names of :data:`sim.replay.metrics.METRICS`)."""
RANGE_RUNS = 64
"""Jittered runs that give each recording's own spread (the floor of the predictive spread)."""


def prediction_rows(
    traces: Mapping[str, Union[Trace, TracePool]],
    runs_dir: Union[str, Path],
    jitter: float,
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
        jitter (float): the jitter of the recordings' own spread (:data:`RANGE_RUNS` runs drawn
            across the recordings: :func:`sim.replay.pool.simulate_pooled`); the prediction
            itself replays each recording exactly (jitter 0).
        seed (int, default 0): seed of the jitter.
        orders (sequence of int): the batch orders of the measured runs
            (default :data:`sim.traces.real.CHECK_ORDERS`).

    Returns:
        list of dict: ``model``, ``policy``, ``order`` (of the real run), ``metric``,
        ``predicted`` (the mean of the recordings' exact replays), ``each`` (each recording's
        exact replay), ``low`` and ``high`` (the predictive spread: the :data:`LEVEL`
        Student-t prediction interval of ``each``, :func:`sim.replay.spread.prediction_interval`,
        widened to hold ``jittered`` and clipped to the metric's range), ``level``
        (:data:`LEVEL`, or None from one recording: then ``low`` and ``high`` are the jittered
        spread alone, which claims no level), ``jittered`` (the 5th and 95th percentile of the
        pooled jittered runs), ``alone`` (each recording's own jittered 5-95% spread, as (low,
        high)), ``measured``, ``error`` (predicted - measured), ``stick`` (what the measured
        safe scale knows of overflows: :attr:`sim.replay.measured.MeasuredRun.stick`).

    Raises:
        TypeError: ``traces`` is not a mapping (the call before models were named).
        ValueError: a measured run is missing or its step count differs from the traces'.
    """
    if not isinstance(traces, Mapping):
        raise TypeError(
            "traces must be a mapping of model name -> Trace or TracePool, got "
            f"{type(traces).__name__}: call prediction_rows({{name: TracePool([...])}}, runs_dir, "
            "jitter, orders=(...))"
        )
    rows = []
    for model, pool in traces.items():
        recordings = pool.traces if isinstance(pool, TracePool) else [pool]
        for label, policy in CHECKED_POLICIES.items():
            exact = [simulate(policy, t, runs=1, jitter=0.0).metrics for t in recordings]
            alone = [simulate(policy, t, RANGE_RUNS, seed, jitter).metrics for t in recordings]
            (spread,) = simulate_pooled([policy], pool, RANGE_RUNS, seed, jitter)
            predicted = {}  # per metric, the same for every measured run
            for metric in PREDICTED:
                each = [float(m[metric][0]) for m in exact]
                jittered = tuple(np.nanpercentile(spread.metrics[metric], [5, 95]).tolist())
                predicted[metric] = {
                    "predicted": float(np.mean(each)),
                    "each": each,
                    **predictive_spread(each, jittered, _top(metric, pool.training_steps)),
                    "jittered": jittered,
                    "alone": [tuple(np.nanpercentile(m[metric], [5, 95]).tolist()) for m in alone],
                }
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


def _top(metric: str, steps: int) -> float:
    """The largest value of ``metric`` over ``steps`` steps: 1 for a share, else ``steps``."""
    return 1.0 if METRICS[metric].kind == "share" else float(steps)


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
    "skipped": f"the measured skipped steps lie inside the predicted {LEVEL:.0%} spread in at "
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
            levels = {r.get("level") for r in sub}
            result = f"inside in {sum(ok)} of {len(sub)}"
            met = levels == {LEVEL} and sum(ok) >= math.ceil(LEVEL * len(sub) - 1e-9)
            if None in levels:
                result += " (from one recording: no spread at a level, goal not checkable)"
            how = [
                f"measured {r['measured']:g}, spread {r['low']:g}-{r['high']:g} (outside by {g:g})"
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


PROJECTED = (3, 4, 6, 8)
"""Recordings counts whose spread width :func:`recordings_compared` projects."""


def recordings_compared(rows: List[Dict[str, Any]], metric: str = "skipped") -> List[Dict]:
    """How many recordings the predicted ``metric`` needs: over the :func:`prediction_rows` of
    ``metric``, each recording's own jittered spread, the jittered runs pooled across the
    recordings (both claim no level), the predictive spread (:data:`LEVEL`), each with how many
    real runs it held and its mean width; then the width the predictive spread would have with
    more recordings (:data:`PROJECTED`), if they disagreed as much as these do
    (:func:`sim.replay.spread.interval_half_width` at their standard deviation; no real runs
    counted).

    Returns:
        list of dict: ``spread`` (words), ``recordings``, ``level`` (:data:`LEVEL` or None),
        ``inside`` (real runs inside; None for a projection), ``runs``, ``width`` (mean high -
        low) and ``apart`` (mean over rows of the largest minus the smallest exact replay of
        the recordings; the same in every row).
    """
    sub = [r for r in rows if r["metric"] == metric]
    if not sub:
        return []
    n = len(sub[0]["each"])
    apart = float(np.mean([max(r["each"]) - min(r["each"]) for r in sub]))
    spreads = [
        (f"recording {k} alone, jittered", 1, None, [r["alone"][k] for r in sub]) for k in range(n)
    ]
    if n > 1:
        spreads.append(
            (
                f"{n} recordings, jittered runs pooled (their 5-95%)",
                n,
                None,
                [r["jittered"] for r in sub],
            )
        )
        spreads.append(
            (
                f"{n} recordings, predictive spread",
                n,
                sub[0]["level"],
                [(r["low"], r["high"]) for r in sub],
            )
        )
    out = [
        {
            "spread": words,
            "recordings": k,
            "level": level,
            "inside": sum(lo <= r["measured"] <= hi for r, (lo, hi) in zip(sub, bounds)),
            "runs": len(sub),
            "width": float(np.mean([hi - lo for lo, hi in bounds])),
            "apart": apart,
        }
        for words, k, level, bounds in spreads
    ]
    if n > 1:
        sds = [float(np.std(r["each"], ddof=1)) for r in sub]
        out += [
            {
                "spread": f"{k} recordings, predictive spread (projected)",
                "recordings": k,
                "level": LEVEL,
                "inside": None,
                "runs": len(sub),
                "width": float(np.mean([2 * interval_half_width(k, sd) for sd in sds])),
                "apart": apart,
            }
            for k in PROJECTED
            if k > n
        ]
    return out
