"""The simulator's predictions from a recorded trace, checked against real runs.

For each real model, :mod:`sim.nnabla_studies.real_traces` records a trace under the default policy
and trains it again for real under each of :data:`sim.replay.measured.CHECKED_POLICIES`
(:class:`sim.replay.measured.MeasuredRun`). :func:`prediction_rows` replays the recorded trace with
the simulator under those other policies and puts each prediction next to the measured value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Union

import numpy as np

from sim.replay.measured import CHECKED_POLICIES, MeasuredRun, run_path
from sim.replay.run import simulate
from updater.trace import Trace

PREDICTED = ("skipped", "below_half_safe", "mean_flushed")
"""The metrics compared (names of :data:`sim.replay.metrics.METRICS`)."""
RANGE_RUNS = 64
"""Jittered runs that give the prediction's spread."""


def prediction_rows(
    traces: Mapping[str, Trace], runs_dir: Union[str, Path], jitter: float, seed: int = 0
) -> List[Dict[str, Any]]:
    """One row per (model, checked policy, metric): predicted and measured values.

    Args:
        traces (mapping model -> Trace): the recorded traces (every step recorded).
        runs_dir (str or Path): where the measured runs are
        (:func:`sim.replay.measured.run_path`).
        jitter (float): the jitter of the spread (:data:`RANGE_RUNS` runs); the prediction
            itself replays the trace exactly (jitter 0).
        seed (int, default 0): seed of the jitter.

    Returns:
        list of dict: ``model``, ``policy``, ``metric``, ``predicted`` (exact replay), ``low``
        and ``high`` (5th and 95th percentile of the jittered runs), ``measured``, ``error``
        (predicted - measured).

    Raises:
        ValueError: a measured run is missing or its step count differs from the trace's.
    """
    rows = []
    for model, trace in traces.items():
        for label, policy in CHECKED_POLICIES.items():
            path = run_path(runs_dir, model, label)
            if not path.exists():
                raise ValueError(
                    f"no measured run {path}: record it with "
                    "python -m sim.nnabla_studies.real_traces"
                )
            run = MeasuredRun.load(path)
            if run.steps != trace.steps:
                raise ValueError(
                    f"{path} has {run.steps} steps but the trace {model} has {trace.steps}: "
                    "record both with the same python -m sim.nnabla_studies.real_traces run"
                )
            exact = simulate(policy, trace, runs=1, jitter=0.0, label=label).metrics
            spread = simulate(policy, trace, runs=RANGE_RUNS, seed=seed, jitter=jitter).metrics
            measured = run.metrics()
            for metric in PREDICTED:
                low, high = np.nanpercentile(spread[metric], [5, 95])
                predicted = float(exact[metric][0])
                rows.append(
                    {
                        "model": model,
                        "policy": label,
                        "metric": metric,
                        "predicted": predicted,
                        "low": float(low),
                        "high": float(high),
                        "measured": measured[metric],
                        "error": predicted - measured[metric],
                    }
                )
    return rows
