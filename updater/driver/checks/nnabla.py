""" "nnabla": ``solver.check_inf_or_nan_grad()`` and ``solver.scale_grad``, two C++ loops; the
gradients are read to the host only for |g| max or the names of non-finite parameters. The loss,
the inputs and the statistics are left to the host."""

from __future__ import annotations

from .base import Ask, Extras, Findings, FiniteCheck, read_and_check


class NnablaCheck(FiniteCheck):
    """ "nnabla": ``solver.check_inf_or_nan_grad()`` (module doc)."""

    name = "nnabla"

    def _inspect(self, params, ask: Ask, extras: Extras) -> Findings:
        finite, absmax, arrays, bad = not self.solver.check_inf_or_nan_grad(), None, None, []
        if ask.need_absmax or not finite:  # |g| max or the names: read the gradients
            arrays, absmax, bad = read_and_check(params(), ask.need_absmax)
        return Findings(arrays=arrays, finite=finite, absmax=absmax, bad=bad, sumsq=None)
