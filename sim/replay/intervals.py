"""The predictive interval of a replay's skipped steps and below-half share, for the commands.

``dls simulate`` and ``dls tune`` replay a policy over the user's recordings of one model;
:func:`replay_intervals` adds where a real run in another batch order should fall, at its
calibrated level (:data:`sim.replay.spread.CALIBRATED`), from one recording on: each recording
replayed exactly, the block-bootstrapped recordings' spread (:mod:`sim.replay.bootstrap`) times
the factor calibrated on the shipped models' batch orders
(:func:`sim.replay.spread.calibrated_interval`). The recordings' and the draws' replays advance
together as the runs of one (:func:`sim.replay.exact.exact_metrics`).
"""

from __future__ import annotations

from typing import Any, Dict, Sequence

from sim.replay.bootstrap import bootstrap_draws
from sim.replay.clock import training_clock
from sim.replay.exact import exact_metrics
from sim.replay.metrics import METRICS
from sim.replay.pool import TracePool
from sim.replay.spread import CALIBRATED, calibrated_interval

INTERVAL_METRICS = tuple(CALIBRATED)
"""The metrics given an interval (names of :data:`sim.replay.metrics.METRICS`)."""


def replay_intervals(
    policy, trace, metrics: Sequence[str] = INTERVAL_METRICS, seed: int = 0
) -> Dict[str, Dict[str, Any]]:
    """The predictive interval of each of ``metrics`` for ``policy`` over ``trace``, at its
    calibrated level (:data:`sim.replay.spread.CALIBRATED`).

    Args:
        policy: the replayed policy.
        trace (Trace or TracePool): the recording(s) of one model.
        metrics (sequence of str, default :data:`INTERVAL_METRICS`): metrics with a calibrated
            factor (:data:`sim.replay.spread.CALIBRATED`).
        seed (int, default 0): seed of the bootstrap, >= 0.

    Returns:
        dict metric -> ``low``, ``high``, ``level`` (the calibrated one), ``recordings`` (how
        many) and ``each`` (each recording's exact replay).
    """
    for metric in metrics:
        if metric not in CALIBRATED:
            raise ValueError(f"metrics must be among {', '.join(CALIBRATED)}, got {metric!r}")
    recordings = trace.traces if isinstance(trace, TracePool) else [trace]
    joined, draws = bootstrap_draws(recordings, seed)
    clocked = [(training_clock(t), None) for t in recordings]
    values = exact_metrics(policy, clocked + [(joined, index) for index in draws], metrics)
    n, steps = len(recordings), joined.steps // len(recordings)
    return {
        metric: metric_interval(
            metric, [float(v) for v in values[metric][:n]], values[metric][n:], steps
        )
        for metric in metrics
    }


def metric_interval(metric: str, each: Sequence[float], drawn, steps: int) -> Dict[str, Any]:
    """The interval of :func:`replay_intervals` for ``metric`` from each recording's exact
    replay ``each`` and the bootstrapped draws' replays ``drawn``, over runs of ``steps``."""
    share = METRICS[metric].kind == "share"
    low, high = calibrated_interval(
        each,
        drawn,
        CALIBRATED[metric][0],
        unit=1 / steps if share else 1.0,
        top=1.0 if share else float(steps),
    )
    return {
        "low": low,
        "high": high,
        "level": CALIBRATED[metric][1],
        "recordings": len(each),
        "each": list(each),
    }
