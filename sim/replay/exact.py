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

from typing import Dict, Sequence, Tuple

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
    lengths = sorted({trace.steps if index is None else len(index) for trace, index in sources})
    if len(lengths) != 1:
        raise ValueError(f"sources must replay one number of steps, got {lengths}")
    columns, steps_of = _rule_columns(sources, lengths[0])
    scale, overflow = _advance_each(policy, columns, steps_of)
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


def _rule_columns(sources, steps: int) -> tuple:
    """What the step rule reads of each step of the traces of ``sources`` (each trace once,
    laid end to end): the largest unscaled gradient, the recorded overflow threshold (NaN where
    nothing is known: no scale reaches it, not even an infinite one), the floor (0 where not
    known) and the bad-batch flag, as :func:`sim.replay.run._overflow_limits` gives them a step
    at a time; and, per (step, run), the place of the run's step in them (int64, ``steps`` x runs:
    the only per-(step, run) input the loop holds)."""
    first: Dict[int, int] = {}  # id of a trace -> where its steps start
    parts = []
    for trace, _ in sources:
        if id(trace) not in first:
            first[id(trace)] = sum(len(p[0]) for p in parts)
            threshold, floor = overflow_thresholds(trace)
            known = trace.thresholds.known
            over = np.where(known, np.inf if threshold is None else threshold, np.nan)
            parts.append((trace.absmax, over, np.where(known, floor[:, 0], 0.0), trace.nonfinite))
    steps_of = np.empty((steps, len(sources)), dtype=np.int64)
    for k, (trace, index) in enumerate(sources):
        steps_of[:, k] = first[id(trace)] + (np.arange(steps) if index is None else index)
    return [np.concatenate(column) for column in zip(*parts)], steps_of


def _advance_each(policy, columns, steps_of) -> tuple:
    """The loop of :func:`sim.replay.run._advance` without jitter, each run reading its own
    step of ``columns`` (:func:`_rule_columns`) at the place ``steps_of`` gives. Returns the
    scales (steps + 1, runs) and overflow flags (steps, runs)."""
    absmax, over, floor, bad = columns
    steps, runs = steps_of.shape
    scale = np.empty((steps + 1, runs))
    overflow = np.empty((steps, runs), dtype=bool)
    needs_absmax = policy.needs_grad_absmax
    update = policy.update
    state = policy.init((runs,))
    for t in range(steps):
        at = steps_of[t]
        s = state.scale
        scale[t] = s
        a = absmax[at] * s
        bad_t = bad[at]
        _, finite = _step_outcome(a, s, (over[at], floor[at]), bad_t, out=overflow[t])
        if bad_t.any():  # the policy's third outcome, for the runs whose step is bad
            state = update(state, finite, a if needs_absmax else None, bad_t)
        else:
            state = update(state, finite, a) if needs_absmax else update(state, finite)
    scale[steps] = state.scale
    return scale, overflow
