"""What one recorded step measured (NumPy only): the one value a
:class:`updater.trace.recorder.GradientRecorder` takes per step (:class:`MeasuredStep`), from the
updater's recording hook (:mod:`updater.driver.recording`) or from
:meth:`~updater.trace.recorder.GradientRecorder.record`; the binade histogram of its gradient
values (:func:`binade_histogram`, bins :data:`EXP_MIN` .. :data:`EXP_MAX`) and what a recorder
keeps of it until it writes it (:meth:`MeasuredStep.reduced`). Each group of the trace
(:data:`updater.trace.format.GROUPS`) turns it into its part of the step's row."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence, Tuple

import numpy as np

from ..common.float16 import FP16_OVERFLOW
from ..common.validation import check_number, check_positive

EXP_MIN = -80
"""Binade of the first histogram bin (values below 2**EXP_MIN are counted there)."""
EXP_MAX = 40
"""Binade of the last histogram bin (values at or above 2**EXP_MAX are counted there)."""
NBINS = EXP_MAX - EXP_MIN + 1


def binade_histogram(values) -> tuple:
    """Histogram one step's gradient values by binade.

    Args:
        values (array-like of float): gradient values (any float dtype, any shape).

    Returns:
        ``(counts, zeros, absmax, finite)``: int64 counts of length :data:`NBINS` over nonzero
        finite magnitudes, the number of exact zeros, the largest finite magnitude (0.0 if none)
        and whether every value was finite.

    >>> counts, zeros, absmax, finite = binade_histogram([0.0, 0.75, -3.0, 1e-30])
    >>> int(counts[-1 - EXP_MIN]), int(counts[1 - EXP_MIN]), zeros, absmax, finite
    (1, 1, 1, 3.0, True)
    """
    a = np.abs(np.asarray(values, dtype=np.float64).ravel())
    fin = np.isfinite(a)
    all_finite = bool(fin.all())
    if not all_finite:
        a = a[fin]
    nonzero = a[a > 0]
    _, exp = np.frexp(nonzero)
    binade = np.clip(exp.astype(np.int64) - 1, EXP_MIN, EXP_MAX) - EXP_MIN
    counts = np.bincount(binade, minlength=NBINS).astype(np.int64)
    absmax = float(nonzero.max()) if nonzero.size else 0.0
    return counts, int(a.size - nonzero.size), absmax, all_finite


def below_overflow(finite_scale, overflow_scale):
    """Where a finite scale is a number ``>= 0`` (0: not known) below the step's overflow scale
    (inf: none): the rule of :attr:`updater.trace.thresholds.Thresholds.finite_scale`; NaN
    fails."""
    return (np.asarray(finite_scale) >= 0) & (finite_scale < overflow_scale)


def check_step(overflow_scale: float, finite_scale: float) -> None:
    """``ValueError`` unless one step's ``finite_scale`` keeps :func:`below_overflow`."""
    if not below_overflow(finite_scale, overflow_scale):
        raise ValueError(
            f"finite_scale must be below the step's overflow scale {overflow_scale!r}, got "
            f"{finite_scale!r}"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ArrayHistograms:
    """The histograms of a recorded step's gradient arrays divided by its scale
    (:meth:`MeasuredStep.reduced`).

    Attributes:
        counts (int64 array ``(P, NBINS)``), zeros (int64 array ``(P,)``), absmax (float64
            array ``(P,)``): each array's histogram (``P`` 1: the arrays' summed); an
            overflowed array's ``absmax`` is at least 65520 / scale.
    """

    counts: np.ndarray
    zeros: np.ndarray
    absmax: np.ndarray


@dataclass(frozen=True, kw_only=True, slots=True)
class MeasuredStep:
    """One recorded step, built by keyword and checked.

    Attributes:
        step (int): the ``update()`` call number (0-based).
        grads (sequence of arrays): the recorded attempt's gradients as scaled by ``scale``
            (float16 or float32; may hold inf/NaN).
        scale (float): the loss scale of the recorded attempt, finite > 0.
        bad_batch (bool, default False): the step was a bad batch (an inf/NaN loss or input:
            bad data, skipped at every scale, whatever its gradients).
        overflow_scale (float, default inf): the smallest scale at which another attempt of the
            step overflowed with a finite loss, > 0 (inf: none).
        finite_scale (float, default 0.0): the largest scale at which the step was seen finite
            (by probes), >= 0 (0: not known).
        names (sequence of str or None, default None): the parameter names of ``grads``.
        overflow_probed (bool, default False): probes measured ``overflow_scale``.
        probe_passes (int, default 0): forward/backward rounds the probes of this step ran.
        measured (mapping, default {}): what other probes measured, by the ``KEY`` of the
            trace's group that holds it (``"flush"``: ``(scales, shares)``; ``"forward"``:
            ``(peak, where)``).
    """

    step: int
    grads: Sequence
    scale: float
    bad_batch: bool = False
    overflow_scale: float = math.inf
    finite_scale: float = 0.0
    names: Sequence[str] | None = None
    overflow_probed: bool = False
    probe_passes: int = 0
    measured: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        # a float in range is what check_positive / check_number return it as: no call for it
        scale, finite = self.scale, self.finite_scale
        if not (isinstance(scale, float) and 0 < scale < math.inf):
            scale = check_positive("scale", scale)
        object.__setattr__(self, "scale", float(scale))
        over = self.overflow_scale
        ok = isinstance(over, (int, float, np.integer, np.floating))
        if not ok or isinstance(over, bool) or not over > 0:
            raise ValueError(f"overflow_scale must be a number > 0 or None, got {over!r}")
        object.__setattr__(self, "overflow_scale", float(over))
        if not (isinstance(finite, float) and 0 <= finite < math.inf):
            finite = check_number("finite_scale", finite, 0.0, math.inf)
        object.__setattr__(self, "finite_scale", float(finite))
        object.__setattr__(self, "grads", list(self.grads))

    def reduced(self, per_array: bool) -> Tuple[MeasuredStep, ArrayHistograms]:
        """What a recorder keeps of the step until it writes it: the step without its
        gradients (and without its names unless ``per_array``; its ``overflow_scale`` at most
        its ``scale`` when they overflowed there) and their histograms divided by the scale,
        one row per array with ``per_array``, else summed.

        Non-finite gradients of a step that is not a bad batch overflowed at its scale: their
        arrays' ``absmax`` is at least 65520 / scale and the scale is an overflow scale
        (``ValueError`` unless ``finite_scale`` stays below it, :func:`check_step`)."""
        rows = [binade_histogram(np.asarray(g, dtype=np.float64) / self.scale) for g in self.grads]
        absmax = np.array([r[2] for r in rows], np.float64)
        finite = np.array([r[3] for r in rows], bool)
        over = self.overflow_scale
        if not finite.all() and not self.bad_batch:
            absmax[~finite] = np.maximum(absmax[~finite], FP16_OVERFLOW / self.scale)
            over = min(over, self.scale)
        check_step(over, self.finite_scale)
        counts = np.array([r[0] for r in rows], np.int64).reshape(-1, NBINS)
        zeros = np.array([r[1] for r in rows], np.int64)
        if not per_array:
            counts, zeros = counts.sum(axis=0, keepdims=True), zeros.sum(keepdims=True)
            absmax = absmax.max(initial=0.0, keepdims=True)
        names = self.names if per_array else None
        kept = dataclasses.replace(self, grads=(), overflow_scale=over, names=names, measured={})
        return kept, ArrayHistograms(counts=counts, zeros=zeros, absmax=absmax)
