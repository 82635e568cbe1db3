"""How much of a trace's gradient signal float16 flushes to zero at a given scale.

Underflow share (binade approximation). A trace stores counts per binade ``e`` (values in
``[2**e, 2**(e+1))``). At a power-of-two effective scale ``2**k`` binade ``e`` moves to
``e + k`` and is counted as flushed iff ``e + k <= -26``; binade -25 is counted as surviving
(float16 rounds (2**-25, 2**-24) up to 2**-24; only the exact tie 2**-25 flushes, ignored here).
For an effective scale ``2**x`` that is not a power of two (jitter, or scales such as 3.0) the
share is interpolated linearly in ``x`` between ``floor(x)`` and ``floor(x) + 1``, which is exact
when values are log-uniform inside each binade. The share counts only nonzero finite values.
"""

from __future__ import annotations

import numpy as np

from updater.common.float16 import FP16_FLUSH_BINADE
from updater.common.validation import check_instance
from updater.trace import EXP_MIN, NBINS, Trace


def flushed_table(trace: Trace) -> np.ndarray:
    """Cumulative share table ``F (steps, NBINS + 1)``: ``F[t, i]`` is the share of step ``t``'s
    nonzero values in bins below ``i`` (0 for a step without nonzero values)."""
    check_instance("trace", trace, Trace)
    counts = trace.counts
    total = counts.sum(axis=1, keepdims=True)
    cum = np.concatenate([np.zeros((trace.steps, 1)), np.cumsum(counts, axis=1)], axis=1)
    return cum / np.maximum(total, 1)


def flushed_share(trace: Trace, scale, table: np.ndarray | None = None) -> np.ndarray:
    """Share of nonzero values flushed to zero at effective ``scale``, per step (binade model).

    Args:
        trace (Trace): the trace.
        scale (float or array broadcastable to (steps, runs)): effective scale per step (the
            loss scale times any jitter factor); 0 means everything is flushed.
        table (array, optional): :func:`flushed_table` of ``trace``, to reuse.

    Returns:
        float64 array of shares in [0, 1] with the broadcast shape of ``scale`` against
        ``(steps, 1)`` (a 1-D ``scale`` of length steps gives ``(steps,)``).

    >>> from updater.trace import Trace, binade_histogram
    >>> t = Trace.from_steps([[2.0**-30, 2.0**-27, 2.0**-20, 1.0]])
    >>> flushed_share(t, 1.0).tolist(), flushed_share(t, 8.0).tolist()
    ([0.5], [0.25])
    """
    table = flushed_table(trace) if table is None else table
    return flushed_share_of_table(table, scale)


def flushed_share_of_table(table: np.ndarray, scale) -> np.ndarray:
    """:func:`flushed_share` from a cumulative share table (one row per step)."""
    s = np.asarray(scale, dtype=np.float64)
    one_d = s.ndim <= 1
    s2 = s.reshape(-1, 1) if one_d else s
    steps = table.shape[0]
    shape = np.broadcast_shapes(s2.shape, (steps, 1))
    with np.errstate(divide="ignore"):
        pos = np.log2(s2)
    # bins below index FP16_FLUSH_BINADE - k - EXP_MIN are flushed at scale 2**k; a fractional
    # index interpolates (each pass in place: a new array of the result's size costs as much)
    np.subtract(FP16_FLUSH_BINADE - EXP_MIN, pos, out=pos)
    pos = np.clip(
        np.broadcast_to(pos, shape), 0.0, float(NBINS), out=pos if pos.shape == shape else None
    )
    i0 = pos.astype(np.int64)  # floor, as pos >= 0
    frac = np.subtract(pos, i0, out=pos)
    i0 += (np.arange(steps, dtype=np.int64) * (NBINS + 1))[:, None]
    step_up = np.zeros_like(table)
    step_up[:, :-1] = np.diff(table, axis=1)  # F[i + 1] - F[i]; 0 past the last edge
    share = np.multiply(frac, step_up.ravel().take(i0), out=frac)
    share += table.ravel().take(i0)
    return share[:, 0] if one_d else share


def pooled_flushed_share(trace: Trace, scale) -> np.ndarray:
    """Share of all the trace's nonzero values (every step pooled) flushed at ``scale``.

    Args:
        trace (Trace): the trace.
        scale (float or array of floats > 0): effective scale(s).

    Returns:
        float64 array with the shape of ``scale``.

    >>> from updater.trace import Trace
    >>> t = Trace.from_steps([[2.0**-30, 2.0**-27], [2.0**-20, 1.0]])
    >>> pooled_flushed_share(t, [1.0, 8.0]).tolist()
    [0.5, 0.25]
    """
    counts = trace.counts.sum(axis=0, keepdims=True)
    cum = np.concatenate([[0.0], np.cumsum(counts[0])]) / max(counts.sum(), 1)
    s = np.asarray(scale, dtype=np.float64)
    return flushed_share_of_table(cum[None, :], s.reshape(-1)).reshape(s.shape)


def measured_flushed_share(trace: Trace, scale) -> np.ndarray:
    """Share flushed at effective ``scale``, per step, from the trace's measured shares
    (``Probes(flush=True)``): on a measured step, interpolated linearly in
    log2 of the scale between its measured scales, and outside them the binade model
    (:func:`flushed_share`) shifted by the difference between measured and model at the nearest
    measured scale, kept in [0, 1]. On a step without measurements (``Probes.flush_every`` > 1, a
    bad batch) the step's own binade model plus the difference (measured minus model, at the step's
    query scale) of the measured steps before and after it, weighted linearly by distance (the
    nearest one's alone before the first and after the last). Same arguments and result as
    :func:`flushed_share`.

    >>> from updater.trace import Trace
    >>> import dataclasses
    >>> t = Trace.from_steps([[2.0**-30, 1.0]])
    >>> t = dataclasses.replace(t, flush_scales=[[1.0, 4.0]], flush_shares=[[0.5, 0.5]])
    >>> measured_flushed_share(t, [2.0]).tolist(), flushed_share(t, 2.0**10).tolist()
    ([0.5], [0.0])
    """
    s = np.asarray(scale, dtype=np.float64)
    one_d = s.ndim <= 1
    query = np.broadcast_to(
        s.reshape(-1, 1) if one_d else s, (trace.steps, 1 if one_d else s.shape[1])
    )
    model = flushed_share(trace, query)  # the binade model, (steps, runs)
    table = flushed_table(trace)
    with np.errstate(divide="ignore"):
        logq = np.log2(query)
    measured = np.flatnonzero(~np.isnan(trace.flush_shares).all(axis=1))
    if measured.size == 0:
        return model[:, 0] if one_d else model
    shift = np.zeros_like(model)  # measured minus model, interpolated between measured steps
    edges = np.concatenate([[0], measured, [trace.steps - 1]])
    for i, t in enumerate(measured):
        lo, hi = edges[i] if i else 0, edges[i + 2]  # the steps t's measurement reaches
        lo = 0 if i == 0 else lo + 1
        hi = trace.steps - 1 if i == measured.size - 1 else hi - 1
        reach = np.arange(lo, hi + 1)
        weight = np.ones(reach.size)
        if i > 0:
            left = reach < t
            weight[left] = (reach[left] - edges[i]) / (t - edges[i])
        if i < measured.size - 1:
            right = reach > t
            weight[right] = (edges[i + 2] - reach[right]) / (edges[i + 2] - t)
        shift[reach] += weight[:, None] * _measured_minus_model(trace, table, t, logq[reach])
    return np.clip(model + shift, 0.0, 1.0)[:, 0] if one_d else np.clip(model + shift, 0.0, 1.0)


def _measured_minus_model(trace: Trace, table, t: int, logq: np.ndarray) -> np.ndarray:
    """At log2 scales ``logq`` (any shape): step ``t``'s measured flushed share (interpolated
    between its measured scales, the model shifted outside them) minus its binade model."""
    ok = ~np.isnan(trace.flush_shares[t])
    order = np.argsort(trace.flush_scales[t, ok])
    xs = np.log2(trace.flush_scales[t, ok][order])
    ys = trace.flush_shares[t, ok][order]
    model = flushed_share_of_table(table[t : t + 1], np.exp2(logq.reshape(-1))).reshape(logq.shape)
    at_edges = flushed_share_of_table(table[t : t + 1], np.exp2(xs[[0, -1]]))
    inside = np.interp(logq, xs, ys) - model
    return np.where(
        logq < xs[0], ys[0] - at_edges[0], np.where(logq > xs[-1], ys[-1] - at_edges[1], inside)
    )


def replay_flushed_share(trace: Trace, scale) -> np.ndarray:
    """The flushed share the simulator replays: measured (:func:`measured_flushed_share`) when
    the trace holds measurements, else the binade model (:func:`flushed_share`)."""
    if trace.has_flush:
        return measured_flushed_share(trace, scale)
    return flushed_share(trace, scale)
