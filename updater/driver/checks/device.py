""" "solver" (any device, the default off the CPU): one nnabla graph over the concatenated
gradients on their device (:class:`updater.driver.flat.DeviceStats`, a fixed number of functions)
and one host read of its small result per check; gradients never travel to the host and are
unscaled with ``solver.scale_grad``. The same read checks the loss and the batch's inputs (when an
attempt has one round) and the state the forward pass writes."""

from __future__ import annotations

from ..flat import DeviceStats, loss_context
from .base import NOT_CHECKED, Ask, Extras, Findings, FiniteCheck, grads_of, non_finite_names


class DeviceCheck(FiniteCheck):
    """ "solver" (module doc).

    Args:
        solver: the nnabla solver.
        loss (nnabla.Variable): the loss, checked with the gradients.
        flat (DeviceStats): the device graphs.
    """

    name = "solver"
    reads_statistics = True

    def __init__(self, solver, loss, flat: DeviceStats):
        super().__init__(solver)
        self.loss = loss
        self.flat = flat

    @classmethod
    def build(cls, solver, loss, sizes) -> DeviceCheck:
        """On the device of ``loss``'s last function."""
        return cls(solver, loss, DeviceStats(loss_context(loss)))

    def reads_batch(self, rounds: int) -> bool:
        """With one round: the loss and the inputs are read with the gradients."""
        return rounds == 1

    def _inspect(self, params, ask: Ask, extras: Extras) -> Findings:
        params = params()
        over = (ask.absmax_over or []) if ask.need_absmax else None
        inputs, statistics = extras.inputs, extras.statistics
        stats = self.flat.read(
            grads_of(params),
            over,
            ask.unscale_by if ask.need_sumsq else None,
            self.loss,
            inputs or (),
            statistics or (),
            extras.ranged,
        )
        finite = stats.finite
        batch = inputs is not None
        return Findings(
            arrays=None,
            finite=finite,
            absmax=stats.absmax,
            bad=[] if finite else non_finite_names(params),
            sumsq=stats.sumsq,
            loss_finite=not stats.loss_bad if batch else NOT_CHECKED,
            inputs_in_range=not (inputs and stats.inputs_bad) if batch else NOT_CHECKED,
            statistics_finite=(
                not (statistics and stats.statistics_bad) if statistics is not None else NOT_CHECKED
            ),
        )

    def sumsq(self, params) -> float:
        """The device graph's sum of squares, one host read."""
        sumsq = self.flat.read(grads_of(params()), None, 1.0).sumsq
        assert sumsq is not None  # a factor given: the graph sums the squares
        return sumsq
