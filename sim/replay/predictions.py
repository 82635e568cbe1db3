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
        (predicted - measured), ``stick`` (what the measured safe scale knows of overflows:
        :attr:`sim.replay.measured.MeasuredRun.stick`); the ``skipped`` rows also list the
        steps skipped in both, in the measured run only and in the exact replay only
        (``skipped_both``, ``skipped_measured_only``, ``skipped_predicted_only``).

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
            predicted_at = simulate(policy, trace, runs=1, jitter=0.0).skipped[:, 0]
            steps = {
                "skipped_both": np.flatnonzero(predicted_at & ~run.applied).tolist(),
                "skipped_measured_only": np.flatnonzero(~predicted_at & ~run.applied).tolist(),
                "skipped_predicted_only": np.flatnonzero(predicted_at & run.applied).tolist(),
            }
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
                        "stick": run.stick,
                        **(steps if metric == "skipped" else {}),
                    }
                )
    return rows


GOALS = {
    "skipped": "the measured skipped steps lie inside the predicted 5-95% spread in every run",
    "below_half_safe": "steps below half the safe scale: mean |predicted - measured| <= 5 points",
    "mean_flushed": "flushed share within 25% (relative) or 0.01 points of the measured value in "
    "at least 6 of 8 runs (75% of the runs)",
}
"""The goals the predictions are held to, per metric (issue 19)."""


def prediction_goals(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Each goal of :data:`GOALS` checked on :func:`prediction_rows` output.

    Returns:
        list of dict: ``metric``, ``goal`` (words), ``result`` (words, with the numbers),
        ``met`` (bool) and ``misses`` (the runs that miss: ``model``, ``policy`` and by how
        much, in words).
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
            met = all(ok)
            how = [f"measured {r['measured']:g}, spread {r['low']:g}-{r['high']:g} "
                   f"(outside by {g:g}); skipped at the same steps in both: "
                   f"{r['skipped_both']}, in the real run only: {r['skipped_measured_only']}, "
                   f"in the replay only: {r['skipped_predicted_only']}"
                   for r, g in zip(sub, gaps)]  # fmt: skip
        elif metric == "below_half_safe":
            mean = float(np.mean([abs(r["error"]) for r in sub]))
            ok = [abs(r["error"]) <= 0.05 for r in sub]
            result = f"mean |error| {100 * mean:.1f} points"
            met = mean <= 0.05
            how = [f"error {100 * r['error']:+.1f} points" for r in sub]
        else:
            ok = [abs(r["error"]) <= max(0.25 * r["measured"], 1e-4) for r in sub]
            result = f"within in {sum(ok)} of {len(sub)}"
            met = sum(ok) >= 0.75 * len(sub)
            how = [f"predicted {100 * r['predicted']:.3g}%, measured {100 * r['measured']:.3g}%"
                   for r in sub]  # fmt: skip
        misses = [
            {"model": r["model"], "policy": r["policy"], "by": h}
            for r, good, h in zip(sub, ok, how)
            if not good
        ]
        out.append({"metric": metric, "goal": goal, "result": result, "met": met, "misses": misses})
    return out
