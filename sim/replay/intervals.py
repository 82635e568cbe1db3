"""The predictive spread of a replay's skipped steps and below-half share, for the commands.

``dls simulate`` and ``dls tune`` replay a policy over the user's recordings of one model with
jitter; :func:`replay_intervals` adds where a real run should fall, as the report's predictions
do (:func:`sim.replay.spread.predictive_spread`): each recording replayed exactly (jitter 0),
their Student-t prediction interval at :data:`sim.replay.spread.LEVEL` from two recordings on,
widened to hold the jittered runs' 5-95% spread; from one recording the jittered spread alone,
which claims no level.
"""

from __future__ import annotations

from typing import Any, Dict, Sequence

import numpy as np

from sim.replay.metrics import METRICS
from sim.replay.pool import TracePool
from sim.replay.result import RunResult
from sim.replay.run import simulate
from sim.replay.spread import predictive_spread

INTERVAL_METRICS = ("skipped", "below_half_safe")
"""The metrics given an interval (names of :data:`sim.replay.metrics.METRICS`)."""


def replay_intervals(
    policy, trace, jittered: RunResult, metrics: Sequence[str] = INTERVAL_METRICS
) -> Dict[str, Dict[str, Any]]:
    """The predictive spread of each of ``metrics`` for ``policy`` over ``trace``.

    Args:
        policy: the replayed policy.
        trace (Trace or TracePool): the recording(s) of one model.
        jittered (RunResult): ``policy``'s jittered runs over ``trace``
            (:func:`sim.replay.pool.simulate_pooled`), whose 5-95% spread the interval holds.
        metrics (sequence of str, default :data:`INTERVAL_METRICS`): per-run metrics.

    Returns:
        dict metric -> ``low``, ``high``, ``level`` (None from one recording),
        ``recordings`` (how many) and ``each`` (each recording's exact replay).
    """
    recordings = trace.traces if isinstance(trace, TracePool) else [trace]
    exact = [simulate(policy, t, runs=1, jitter=0.0).metrics for t in recordings]
    out = {}
    for metric in metrics:
        if METRICS[metric].kind not in ("count", "share"):
            raise ValueError(f"metrics must be counts or shares, got {metric!r}")
        each = [float(m[metric][0]) for m in exact]
        spread = tuple(np.nanpercentile(jittered.metrics[metric], [5, 95]).tolist())
        top = 1.0 if METRICS[metric].kind == "share" else float(jittered.steps)
        out[metric] = {
            **predictive_spread(each, spread, top),
            "recordings": len(recordings),
            "each": each,
        }
    return out
