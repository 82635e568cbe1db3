"""Exact replays (jitter 0) of one policy over many recordings of one length, advanced together.

The predictive interval (:mod:`sim.replay.intervals`) replays a policy exactly over each
recording and over :data:`sim.replay.bootstrap.RESAMPLES` block-bootstrapped ones, one run
each. :func:`exact_metrics` advances all those runs in one loop, each reading its own
recording's step: the step rule of :mod:`sim.replay.run` (its ``_step_outcome``) given a size,
an overflow threshold, a floor and a bad-batch flag per run. The policy's rules are elementwise
and each run's metrics are worked out for it alone by :func:`sim.replay.result.run_result`, so
every value equals that of ``simulate(policy, trace, runs=1, jitter=0.0)`` over the run's
recording alone, bit for bit (tests/sim/replay/test_exact_together.py).
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

from sim.replay.result import overflow_thresholds, run_result
from sim.replay.run import _step_outcome
from updater.policy.presets import as_policy
from updater.trace import Trace


def exact_metrics(
    policy, sources: Sequence[Tuple[Trace, np.ndarray | None]], metrics: Sequence[str]
) -> Dict[str, np.ndarray]:
    """``policy``'s ``metrics`` replayed exactly over each recording of ``sources``, all runs
    advancing together (module doc).

    Args:
        policy: the replayed policy (or a preset name).
        sources (sequence of (Trace, int array or None)): one run each: a trace on the training
            clock (:func:`sim.replay.clock.training_clock`) and the indices of its steps the
            run replays, in order (None: all of them); run ``k`` replays
            ``trace.take(index)``. Every run has the same number of steps; at least one run.
        metrics (sequence of str): per-run metrics (:data:`sim.replay.metrics.METRICS`).

    Returns:
        dict metric -> float64 array, one value per run of ``sources``.
    """
    policy = as_policy(policy)
    if not sources:
        raise ValueError("sources must hold at least one (trace, index) pair, got none")
    rules: Dict[int, tuple] = {}
    for trace, _ in sources:  # each trace's per-step values once, however many runs read it
        rules.setdefault(id(trace), _rule_columns(trace))
    picked = [_pick(rules[id(trace)], index) for trace, index in sources]
    lengths = sorted({len(p[0]) for p in picked})
    if len(lengths) != 1:
        raise ValueError(f"sources must replay one number of steps, got {lengths}")
    absmax, over, floor, bad = (np.stack(column, axis=1) for column in zip(*picked))
    scale, overflow = _advance_each(policy, absmax, over, floor, bad)
    factor = np.ones((lengths[0], 1))  # jitter 0, as simulate draws it
    out = {m: np.empty(len(sources)) for m in metrics}
    for k, (trace, index) in enumerate(sources):
        own = trace if index is None else trace.take(index)
        scale_k = np.ascontiguousarray(scale[:, k : k + 1])  # as one run's loop lays it out
        overflow_k = np.ascontiguousarray(overflow[:, k : k + 1])
        result = run_result(policy, own, factor, scale_k, overflow_k, None).metrics
        for m in metrics:
            out[m][k] = float(result[m][0])
    return out


def _rule_columns(trace: Trace) -> List[np.ndarray]:
    """Per step of ``trace``, what the step rule reads: the largest unscaled gradient, the
    recorded overflow threshold (NaN where nothing is known: no scale reaches it, not even an
    infinite one), the floor (0 where not known) and the bad-batch flag; as
    :func:`sim.replay.run._overflow_limits` gives them a step at a time."""
    threshold, floor = overflow_thresholds(trace)
    known = trace.thresholds.known
    over = np.where(known, np.inf if threshold is None else threshold, np.nan)
    return [trace.absmax, over, np.where(known, floor[:, 0], 0.0), trace.nonfinite]


def _pick(columns: List[np.ndarray], index: np.ndarray | None) -> List[np.ndarray]:
    """``columns`` at the steps ``index`` (None: all)."""
    return columns if index is None else [c[index] for c in columns]


def _advance_each(policy, absmax, over, floor, bad) -> tuple:
    """The loop of :func:`sim.replay.run._advance` without jitter, with a value per (step, run)
    of each of the step rule's inputs: float64 ``absmax``, ``over``, ``floor`` and bool ``bad``
    (steps, runs). Returns the scales (steps + 1, runs) and overflow flags (steps, runs)."""
    steps, runs = absmax.shape
    scale = np.empty((steps + 1, runs))
    overflow = np.empty((steps, runs), dtype=bool)
    any_bad = bad.any(axis=1).tolist()
    needs_absmax = policy.needs_grad_absmax
    update = policy.update
    state = policy.init((runs,))
    for t in range(steps):
        s = state.scale
        scale[t] = s
        a = absmax[t] * s
        _, finite = _step_outcome(a, s, (over[t], floor[t]), bad[t], out=overflow[t])
        if any_bad[t]:  # the policy's third outcome, for the runs whose step is bad
            state = update(state, finite, a if needs_absmax else None, bad[t])
        else:
            state = update(state, finite, a) if needs_absmax else update(state, finite)
    scale[steps] = state.scale
    return scale, overflow
