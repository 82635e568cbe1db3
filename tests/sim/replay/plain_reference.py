"""The replay's array formulas as they were before they were made cheaper (issue 42): one new
array per operation, everything over the whole (steps, runs) array at once; and its loop as it
was before it worked out each step's sizes and limits row by row (issue 51): given them whole.
Its per-run metrics as they were before they were counted in fewer passes (issue 51: uint8
counts, masked sums, the flush bounds of the binade model reusing the share), over the bounds of
:func:`sim.replay.flush_basis.flush_bounds` (unchanged). The tests prove the current code gives
the same bits (tests/sim/replay/test_bit_identical.py)."""

import numpy as np

from sim.casting.underflow import flushed_table, measured_flushed_share
from sim.replay.flush_basis import FLUSH_RUN_METRICS, KINDS, flush_basis, flush_bounds
from sim.replay.result import RunResult, _largest_power_of_two_below, overflow_limits, policy_label
from sim.replay.run import _step_outcome
from tests.updater.policy.test_safe_scale_bits import frexp_safe_scale as largest_safe_scale
from updater.common.float16 import FP16_FLUSH_BINADE
from updater.trace import EXP_MIN, NBINS


def jitter_factors(steps, runs, seed=0, jitter=0.25):
    if jitter == 0:
        return np.ones((steps, 1))
    z = np.random.default_rng(seed).standard_normal((runs, steps), dtype=np.float32)
    return np.exp2(jitter * z.T.astype(np.float64))


def safe_scales(absmax, overflow_from=None, max_scale=None, floor=None):
    safe = largest_safe_scale(absmax)
    if overflow_from is not None:
        safe = np.minimum(safe, _largest_power_of_two_below(overflow_from))
    if floor is not None:
        safe = np.maximum(safe, floor)
    return safe if max_scale is None else np.minimum(safe, max_scale)


def flushed_share_of_table(table, scale):
    s = np.asarray(scale, dtype=np.float64)
    one_d = s.ndim <= 1
    s2 = s.reshape(-1, 1) if one_d else s
    steps = table.shape[0]
    shape = np.broadcast_shapes(s2.shape, (steps, 1))
    with np.errstate(divide="ignore"):
        pos = FP16_FLUSH_BINADE - EXP_MIN - np.log2(s2)
    pos = np.clip(np.broadcast_to(pos, shape), 0.0, float(NBINS))
    i0 = pos.astype(np.int64)
    frac = pos - i0
    i0 += (np.arange(steps, dtype=np.int64) * (NBINS + 1))[:, None]
    step_up = np.zeros_like(table)
    step_up[:, :-1] = np.diff(table, axis=1)
    share = table.ravel().take(i0) + frac * step_up.ravel().take(i0)
    return share[:, 0] if one_d else share


def run_metrics(scale, overflow, skipped, safe, flushed, nonfinite):
    steps = scale.shape[0]
    n_skipped = skipped.sum(axis=0)
    n_applied = steps - n_skipped
    flushed_applied = np.where(skipped, 0.0, flushed).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_flushed = flushed_applied / n_applied
        ratio = scale / safe
    within = (ratio >= 0.5) & (ratio <= 2.0)
    first = np.argmax(within, axis=0)
    reached = within[first, np.arange(scale.shape[1])]
    return {
        "overflows": (overflow & ~np.asarray(nonfinite)[:, None]).sum(axis=0),
        "skipped": n_skipped,
        "mean_flushed": mean_flushed,
        "signal_lost": (flushed_applied + n_skipped) / steps,
        "steps_to_safe": np.where(reached, first.astype(np.float64), np.nan),
        "below_half_safe": (ratio < 0.5).sum(axis=0) / steps,
    }


def flush_run_metrics(basis, scale, skipped, flushed):
    low, high, unmeasured, exact = flush_bounds(basis, scale, flushed)
    applied = ~skipped
    steps = scale.shape[0]
    n_skipped = skipped.sum(axis=0)
    sums = [np.where(applied, a, 0.0).sum(axis=0) for a in (low, high)]
    values = (
        (sums[0] + n_skipped) / steps,
        (sums[1] + n_skipped) / steps,
        (applied & unmeasured).sum(axis=0, dtype=np.int32),
        (applied & exact).sum(axis=0, dtype=np.int32),
        np.where(applied & unmeasured, flushed, 0.0).sum(axis=0) / steps,
        np.full(scale.shape[1], KINDS.index(basis.kind), np.int8),
    )
    return dict(zip(FLUSH_RUN_METRICS, values))


def replay_flushed_share(trace, scale):
    """The measured share (unchanged code, over the binade model proven equal) or the binade
    model above."""
    if trace.has_flush:
        return measured_flushed_share(trace, scale)
    return flushed_share_of_table(flushed_table(trace), scale)


def run_result(policy, trace, absmax, factor, scale_all, overflow, label):
    scale = scale_all[:-1]
    skipped = overflow | trace.nonfinite[:, None]
    over, floor = overflow_limits(trace, factor)
    cap = getattr(policy, "max_scale", None)
    safe = safe_scales(np.broadcast_to(absmax, scale.shape), over, cap, floor)
    flushed = replay_flushed_share(trace, scale * factor)
    metrics = run_metrics(scale, overflow, skipped, safe, flushed, trace.nonfinite)
    metrics.update(flush_run_metrics(flush_basis(trace), scale, skipped, flushed))  # whole
    metrics["final_scale"] = scale_all[-1].copy()
    arrays = {"skipped": skipped, "safe_scale": safe, "flushed": flushed}
    return RunResult(
        label=label or policy_label(policy),
        policy=policy,
        trace_name=trace.name,
        scale=scale,
        overflow=overflow,
        metrics=metrics,
        source=lambda name, scale, overflow: arrays[name],
    )


def step_limits(trace, factor):
    """Per step None or ``(limits of every run, floor)``, whole arrays as the loop took them."""
    limit, floor = overflow_limits(trace, factor)
    limits = [None] * trace.steps
    inf = np.full(factor.shape[1], np.inf)
    for t in np.flatnonzero(trace.thresholds.known):
        limits[t] = (inf if limit is None else limit[t], float(floor[t, 0]))
    return limits


def advance(policy, trace, absmax, limits, runs):
    """The loop given every step's sizes ``absmax`` (steps, runs or 1) and :func:`step_limits`
    (tiled to ``runs`` by the caller)."""
    scale = np.empty((trace.steps + 1, runs))
    overflow = np.empty((trace.steps, runs), dtype=bool)
    bad = trace.nonfinite.tolist()
    state = policy.init((runs,))
    for t in range(trace.steps):
        s = state.scale
        scale[t] = s
        a = absmax[t] * s
        _, finite = _step_outcome(a, s, limits[t], bad[t], out=overflow[t])
        if bad[t]:
            state = policy.update(state, finite, a if policy.needs_grad_absmax else None, True)
        elif policy.needs_grad_absmax:
            state = policy.update(state, finite, a)
        else:
            state = policy.update(state, finite)
    scale[trace.steps] = state.scale
    return scale, overflow
