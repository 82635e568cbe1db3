"""What a replayed flushed share rests on: measured, exact, or extrapolated (NumPy only).

A trace recorded with ``Probes(flush=True)`` measured, on its measured steps, the share of the
true nonzero gradient values float16 flushed to zero at a few scales
(:class:`updater.trace.flush.FlushCurve`: one grid from the top of the policy's bounds down,
2^15 to 2^3, with the recorded scale among them,
:mod:`updater.driver.recording.flush_scales`; an older recorder measured at the recorded scale
and 2^-4, 2^-8, 2^-12 times it). Between the lowest and the highest of them the replay
interpolates a measurement; outside them it extrapolates
(:func:`sim.casting.underflow.measured_flushed_share`), which can be far off: flushing measured
at scale 8 and below says little of flushing at 2^15. This module says, per replayed (step,
run), which it was, and bounds the share where it was extrapolated. Rules:

- A larger power-of-two scale flushes no more (scaling by a power of two is exact; it only moves
  values away from float16's flush limit, until they overflow, and an overflowing step is
  skipped). So above the highest measured scale ``hi`` the share lies in ``[0, f(hi)]``; where
  nothing flushed at ``hi`` it is exactly 0, and the extrapolation is **exact**.
- Below the lowest measured scale ``lo`` the share lies in ``[f(lo), 1]``.
- A step the trace did not measure (outside the default sample of ``Probes(flush=True)``, not a
  k-th step of ``flush_every=k``, a bad batch) takes the scales both measured steps around it
  measured (the intersection of their ranges).
- A :class:`~sim.traces.synthetic.SyntheticTrace` (a family) has no measurement to go beyond: its
  histogram is its gradient values, the binade model is exact at every scale (kind ``"model"``).
- Any other trace without flush measurements (a ``GradientRecorder`` run without
  ``Probes(flush=True)``: its histogram holds only what float16 kept at the recorded scale, and
  flushing born upstream shows in no histogram) did not measure flushing at all (kind
  ``"none"``): each applied step's share lies in ``[0, 1]``.

The range is judged on the policy's scale: the replay's jitter (its model of batch-to-batch
gradient size) applies as everywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

import numpy as np

from sim.replay.columns import applied_sum, count_true
from sim.traces.synthetic import SyntheticTrace
from updater.trace import Trace

KINDS = ("model", "measured", "none")
"""The flush bases of a trace: its histogram is exact (a synthetic family), it measured
flushing, it measured none. A per-run metric stores the index."""

FLUSH_RUN_METRICS = (
    "signal_lost_low",
    "signal_lost_high",
    "flush_unmeasured",
    "flush_exact_beyond",
    "flush_unmeasured_lost",
    "flush_basis",
)
"""The per-run metrics of :func:`flush_run_metrics` (besides :data:`sim.replay.metrics.METRICS`:
no table column of their own; the commands print them as ranges and notes)."""

_EDGE = 1e-9
"""Relative slack on the range's ends (a replayed scale equal to a measured one is inside)."""


@dataclass(frozen=True)
class FlushBasis:
    """What a trace knows of flushing, per step.

    Attributes:
        kind (str): one of :data:`KINDS`.
        lo, hi (float64 arrays (steps,) or None): the lowest and highest scale at which the
            step's flushing was measured (NaN: no range; None unless ``kind == "measured"``).
        f_lo, f_hi (float64 arrays (steps,) or None): the shares measured there.
    """

    kind: str
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None
    f_lo: np.ndarray | None = None
    f_hi: np.ndarray | None = None

    @property
    def per_step(self) -> bool:
        """Whether :func:`flush_run_metrics` reads each (step, run)'s share: not on the binade
        model (kind ``"model"``), whose bounds are the share itself."""
        return self.kind != "model"

    @property
    def scales(self) -> tuple:
        """``(lowest, highest)`` scale measured over all steps, or None without measurements."""
        if self.lo is None or np.isnan(self.lo).all():
            return None
        return float(np.nanmin(self.lo)), float(np.nanmax(self.hi))


def flush_basis(trace: Trace) -> FlushBasis:
    """The :class:`FlushBasis` of ``trace`` (module doc)."""
    if not trace.has_flush:
        return FlushBasis("model" if isinstance(trace, SyntheticTrace) else "none")
    scales = np.where(np.isnan(trace.flush_shares), np.nan, trace.flush_scales)
    measured = ~np.isnan(scales).all(axis=1)
    lo, hi, f_lo, f_hi = (np.full(trace.steps, np.nan) for _ in range(4))
    rows = np.flatnonzero(measured)
    if rows.size:
        own = scales[rows]
        low, high = np.nanargmin(own, axis=1), np.nanargmax(own, axis=1)
        lo[rows], hi[rows] = own[np.arange(rows.size), low], own[np.arange(rows.size), high]
        f_lo[rows] = trace.flush_shares[rows, low]
        f_hi[rows] = trace.flush_shares[rows, high]
        steps = np.arange(trace.steps)  # the measured steps before and after each step
        before = np.maximum.accumulate(np.where(measured, steps, 0))
        before = np.where(steps < rows[0], rows[0], before)
        after = np.minimum.accumulate(np.where(measured, steps, trace.steps)[::-1])[::-1]
        after = np.where(steps > rows[-1], rows[-1], after)
        lo, hi = np.maximum(lo[before], lo[after]), np.minimum(hi[before], hi[after])
        f_lo, f_hi = np.minimum(f_lo[before], f_lo[after]), np.maximum(f_hi[before], f_hi[after])
        empty = lo > hi
        lo[empty], hi[empty] = np.nan, np.nan
    return FlushBasis("measured", lo, hi, f_lo, f_hi)


def flush_bounds(basis: FlushBasis, scale: np.ndarray, flushed: np.ndarray) -> tuple:
    """Bounds on the replayed flushed shares ``flushed`` at the policy's scales ``scale`` (both
    ``(steps, runs)``), by the module's rules: ``(low, high, unmeasured, exact)``, the first two
    float64 and the last two bool arrays of that shape (``unmeasured``: the share rests on no
    measurement and is only bounded; ``exact``: beyond the measured scales, and exact there)."""
    if basis.kind == "model":
        no = np.zeros(scale.shape, bool)
        return flushed, flushed, no, no
    if basis.kind == "none":
        yes = np.ones(scale.shape, bool)
        return np.zeros(scale.shape), np.ones(scale.shape), yes, ~yes
    lo, hi = basis.lo[:, None], basis.hi[:, None]
    f_lo, f_hi = basis.f_lo[:, None], basis.f_hi[:, None]
    none = np.isnan(lo) | np.zeros(scale.shape, bool)
    above = scale > hi * (1 + _EDGE)
    below = scale < lo * (1 - _EDGE)
    exact = above & (f_hi == 0)
    up = above & ~exact
    low = np.where(below, np.minimum(flushed, f_lo), np.where(up, 0.0, flushed))
    high = np.where(below, 1.0, np.where(up, np.maximum(flushed, f_hi), flushed))
    low[none], high[none] = 0.0, 1.0
    return low, high, below | up | none, exact


def flush_run_metrics(
    basis: FlushBasis, scale, skipped, flushed, signal_lost=None
) -> Dict[str, np.ndarray]:
    """Per run, over the applied steps (``skipped`` False) of ``(steps, runs)`` arrays:

    - ``signal_lost_low``, ``signal_lost_high``: the bounds of ``signal_lost``
      (:func:`sim.replay.metrics.run_metrics`) that the flushed shares' bounds give;
    - ``flush_unmeasured``: applied steps whose share rests on no measurement;
    - ``flush_exact_beyond``: applied steps beyond the measured scales where that is exact;
    - ``flush_unmeasured_lost``: the replayed shares of the unmeasured steps, summed, over all
      steps (the part of ``signal_lost`` that rests on no measurement);
    - ``flush_basis``: the index of the trace's kind in :data:`KINDS`.

    Where the basis is not :attr:`FlushBasis.per_step` (the binade model) the bounds are
    ``signal_lost`` itself (``run_metrics``' of these runs; required there: both are read-only
    views of it), the counts and the unmeasured share 0 (new arrays never written), and of the
    other arrays only the runs of ``scale`` are read (``skipped``, ``flushed`` may be None).
    """
    runs = scale.shape[1]
    kind = np.full(runs, KINDS.index(basis.kind), np.int8)
    if not basis.per_step:
        bound = signal_lost.view()
        bound.flags.writeable = False
        counts = (np.zeros(runs, np.int32) for _ in range(2))
        values: tuple = (bound, bound, *counts, np.zeros(runs), kind)
        return dict(zip(FLUSH_RUN_METRICS, values))
    low, high, unmeasured, exact = flush_bounds(basis, scale, flushed)
    steps = scale.shape[0]
    applied = ~skipped
    n_skipped = count_true(skipped)
    values = (  # compact (33 bytes a run): they live as long as the result
        (applied_sum(skipped, low) + n_skipped) / steps,
        (applied_sum(skipped, high) + n_skipped) / steps,
        count_true(applied & unmeasured, np.int32),
        count_true(applied & exact, np.int32),
        applied_sum(~(applied & unmeasured), flushed) / steps,
        kind,
    )
    return dict(zip(FLUSH_RUN_METRICS, values))


def flush_summary(metrics: Dict[str, np.ndarray], steps: int) -> Dict[str, object]:
    """The run-averaged row of :func:`flush_run_metrics` (``metrics`` also holds ``skipped``):
    the bounds averaged over runs, with ``mean_flushed_low`` and ``mean_flushed_high`` (the
    bounds of ``mean_flushed``, over runs with an applied step), ``flush_unmeasured`` and
    ``flush_exact_beyond`` as shares of the applied steps (NaN when no step was applied),
    ``flush_unmeasured_lost`` averaged, and ``flush_basis`` the kinds' names (joined by ``+``
    when pooled recordings differ)."""
    applied = steps - metrics["skipped"]
    some = applied > 0
    row: Dict[str, object] = {}
    for name in ("signal_lost_low", "signal_lost_high", "flush_unmeasured_lost"):
        row[name] = float(np.mean(metrics[name]))
    for name in ("signal_lost_low", "signal_lost_high"):
        flushed = (metrics[name][some] * steps - metrics["skipped"][some]) / applied[some]
        row[name.replace("signal_lost", "mean_flushed")] = (
            float(np.mean(flushed)) if some.any() else np.nan
        )
    for name in ("flush_unmeasured", "flush_exact_beyond"):
        row[name] = float(np.mean(metrics[name][some] / applied[some])) if some.any() else np.nan
    row["flush_basis"] = "+".join(KINDS[k] for k in sorted(set(metrics["flush_basis"].tolist())))
    return row
