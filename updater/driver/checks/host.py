""" "numpy" (CPU): host views of the gradients. With few or large arrays (:func:`per_array`), one
fused pass per array that checks and unscales it (:func:`updater.driver.arrays.unscale_grad`);
with many small ones, one NumPy check of the concatenated gradients
(:class:`updater.driver.flat.FlatGraphs`: one nnabla function) and ``solver.scale_grad`` to
unscale. The loss, the inputs and the statistics are left to the host."""

from __future__ import annotations

import numpy as np

from ..arrays import grad_stats, host_view, square_sum, unscale_grad
from ..flat import FlatGraphs, loss_context
from .base import (
    Ask,
    Extras,
    Findings,
    FiniteCheck,
    grads_of,
    non_finite_names,
    overflow_quiet,
    read_and_check,
)

FEW_ARRAYS = 8
PER_ARRAY_VALUES = 2**15
"""The "numpy" path works array by array with at most :data:`FEW_ARRAYS` arrays or at least
this many values per array on average, else on the concatenated gradients."""


def per_array(n_arrays: int, n_values: int) -> bool:
    """Whether the "numpy" path works array by array: its Python and NumPy calls, about 10 us
    per array, are worth saving the copy of the concatenation only for few or large arrays."""
    return n_arrays <= FEW_ARRAYS or n_values >= PER_ARRAY_VALUES * n_arrays


class HostCheck(FiniteCheck):
    """ "numpy": host views, array by array (one pass that checks and, when asked, unscales each)
    or, with ``flat``, one view of all gradients concatenated.

    Args:
        solver: the nnabla solver.
        flat (FlatGraphs or None): the concatenating graphs; None works array by array
            (:func:`per_array`).
    """

    name = "numpy"

    def __init__(self, solver, flat: FlatGraphs | None):
        super().__init__(solver)
        self.flat = flat

    @classmethod
    def build(cls, solver, loss, sizes) -> HostCheck:
        """Array by array when :func:`per_array`, else on the device of ``loss``'s last
        function."""
        by_array = per_array(len(sizes), sum(sizes))
        return cls(solver, None if by_array else FlatGraphs(loss_context(loss)))

    @property
    def by_array(self) -> bool:
        """Whether it works array by array."""
        return self.flat is None

    def _inspect(self, params, ask: Ask, extras: Extras) -> Findings:
        params = params()
        need_absmax, unscale_by = ask.need_absmax, ask.unscale_by
        top, sumsq, arrays = None, None, None
        if need_absmax and ask.absmax_over:
            top = grad_stats([host_view(g) for g in ask.absmax_over])[1]
        own_absmax = need_absmax and top is None  # else |g| max is over absmax_over only
        if self.flat is not None:
            factor = unscale_by if ask.need_sumsq else None
            finite, absmax, sumsq = check_concatenated(self.flat, params, own_absmax, factor)
            bad = [] if finite else non_finite_names(params)
        elif unscale_by is None:
            arrays, absmax, bad = read_and_check(params, own_absmax)
            finite = not bad
        else:
            finite, absmax, bad, sumsq = _unscale_each(params, unscale_by, own_absmax, ask)
        absmax = absmax if top is None else top
        unscaled = self.flat is None and unscale_by is not None
        return Findings(
            arrays=arrays, finite=finite, absmax=absmax, bad=bad, sumsq=sumsq, unscaled=unscaled
        )

    def unscale(self, params, factor: float) -> None:
        """Array by array: NumPy on host views, float32 like ``solver.scale_grad`` and equal to
        it bit for bit; concatenated: ``solver.scale_grad``."""
        if self.flat is not None:
            self.solver.scale_grad(factor)
            return
        with overflow_quiet(factor):
            for p in params().values():
                unscale_grad(p.grad, factor, check=False)

    def sumsq(self, params) -> float:
        """One host view of the concatenation, or one per array."""
        if self.flat is not None:
            return check_concatenated(self.flat, params(), False, 1.0)[2]
        return super().sumsq(params)


def _unscale_each(params, factor: float, need_absmax: bool, ask: Ask):
    """``(finite, absmax or None, bad names, sumsq or None)`` from one fused pass per array that
    checks and unscales it by ``factor``."""
    with overflow_quiet(factor):
        found = [
            unscale_grad(p.grad, factor, True, need_absmax, ask.need_sumsq) for p in params.values()
        ]
    bad = [name for name, f in zip(params, found) if not f[0]]
    finite = not bad
    absmax = max((f[1] for f in found), default=0.0) if need_absmax else None
    sumsq = sum(f[2] for f in found) if ask.need_sumsq and finite else None
    return finite, absmax, bad, sumsq


def check_concatenated(flat: FlatGraphs, params, need_absmax: bool, factor: float | None):
    """``(finite, absmax or None, sumsq or None)`` of the gradients of ``params`` from one host
    view of their concatenation: the exact check of :func:`updater.driver.arrays.grad_stats`, and
    the sum of squares of ``g * factor`` in float32 (the values ``solver.scale_grad`` leaves)."""
    concatenated = flat.concatenated(grads_of(params))
    if concatenated is None:  # no values
        return True, (0.0 if need_absmax else None), (0.0 if factor is not None else None)
    values = host_view(concatenated)
    flags, absmax = grad_stats([values], need_absmax)
    finite = flags[0]
    sumsq = None
    if factor is not None and finite:
        with overflow_quiet(factor):
            sumsq = square_sum(values * np.float32(factor))
    return finite, absmax, sumsq
