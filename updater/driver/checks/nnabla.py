""" "nnabla": ``solver.check_inf_or_nan_grad()`` and ``solver.scale_grad``, two C++ loops; the
gradients are read to the host only for |g| max or the names of non-finite parameters. The loss,
the inputs and the statistics are left to the host. Asked to unscale (``Ask.unscale_by``:
``update()``'s fused pass), it calls ``scale_grad`` right after the check when the gradients are
finite, while nnabla's data of the gradients is still in the processor's caches."""

from __future__ import annotations

from .base import Ask, Extras, Findings, FiniteCheck, read_and_check


class NnablaCheck(FiniteCheck):
    """ "nnabla": ``solver.check_inf_or_nan_grad()`` (module doc)."""

    name = "nnabla"

    def _inspect(self, params, ask: Ask, extras: Extras) -> Findings:
        finite, absmax, arrays, bad = not self.solver.check_inf_or_nan_grad(), None, None, []
        if ask.need_absmax or not finite:  # |g| max or the names: read the gradients
            arrays, absmax, bad = read_and_check(params(), ask.need_absmax)
        unscaled = finite and ask.unscale_by is not None
        if unscaled:  # after the read: its views are of the scaled gradients
            self.solver.scale_grad(ask.unscale_by)
        return Findings(
            arrays=arrays, finite=finite, absmax=absmax, bad=bad, sumsq=None, unscaled=unscaled
        )
