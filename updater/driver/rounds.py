"""The rounds of one attempt: ``solver.zero_grad()``, then ``accum_grad`` rounds of feed, forward
and ``backward(seed)``; the inputs of each round kept for a replay at another scale (a retry, a
probe); the loss and the inputs checked on the host (bad data), the inputs as the functions that
read them see them (:func:`updater.driver.function_roles.input_ranges`): inf/NaN, a value beyond
float16's range where a half-precision function reads it, an index outside the table it
indexes.

Every attempt starts from zero gradients, of the parameters (``zero_grad``) and of the inputs
that have ``need_grad`` (an adversarial input's gradient), so that after a retried or probed
step each holds one attempt's backward."""

from __future__ import annotations

from typing import Callable, Dict, List

import nnabla as nn
import numpy as np

from .arrays import bad_indices, copy_array, describe_inputs, host_view, input_leaves, restore_array
from .function_roles import Range, input_ranges
from .outside_forward import updater_forward


class Rounds:
    """Runs the rounds of an attempt.

    Args:
        solver (nnabla.solvers.Solver): zeroes the gradients.
        loss (nnabla.Variable): the loss.
        data_feeder (callable or None): called before each forward of a new batch.
        accum_grad (int): rounds per attempt.
        clear_buffer (bool): free buffers in forward/backward.
        enabled (bool): loss scaling on (else no loss or input is read).
        params (callable): returns the solver's parameters (to tell inputs from parameters).
        unchecked_inputs (list of Variable): inputs left out of the bad-data check.
        device_checks_batch (bool): the device check reads the loss and the inputs with the
            gradients (used when there is one round).
        counters (Counters): ``batches`` and ``passes`` move here.
        state (callable or None, default None): returns the Variables the step writes
            (:class:`ForwardState`'s), which are state, not inputs: never checked nor replayed.
    """

    def __init__(
        self, solver, loss, data_feeder, accum_grad: int, clear_buffer: bool, enabled: bool,
        params: Callable[[], Dict[str, nn.Variable]], unchecked_inputs: list,
        device_checks_batch: bool, counters, state: Callable[[], list] | None = None,
    ):  # fmt: skip
        self.solver = solver
        self.loss = loss
        self.data_feeder = data_feeder
        self.accum_grad = accum_grad
        self.clear_buffer = clear_buffer
        self.enabled = enabled
        self._params = params
        self.unchecked_inputs = unchecked_inputs
        self.device_checks_batch = device_checks_batch
        self.counters = counters
        self._state = state
        self._inputs: List[nn.Variable] | None = None  # graph inputs, found on first use
        self._checked: List[nn.Variable] | None = None  # and those checked, with their ranges
        self._ranges: List[Range] = []
        self._bounded: list = []  # (index, center, radius) of the bounded checked inputs
        self._kept: List[List[nn.NdArray]] = []  # per round, for a replay
        self._bad_inputs = frozenset()  # indices of the inputs found bad (host check)
        self._check_pending = False  # the one round's inputs are checked when first asked

    @property
    def batch_on_host(self) -> bool:
        """Whether the loss and the inputs are checked on the host, each round (one read of
        the loss, one pass over the inputs); else the device check reads them with the
        gradients (one round)."""
        return not self.device_checks_batch or self.accum_grad > 1

    @property
    def inputs_finite(self) -> bool:
        """No checked input was bad in the last rounds checked on the host: with one round, its
        inputs (still in place) are read when first asked, so a step whose gradients are
        finite, which asks nothing, reads none."""
        self._check_pending_round()
        return not self._bad_inputs

    def _check_pending_round(self) -> None:
        if self._check_pending:  # whether any is bad: the names are read when asked
            self._check_pending = False
            self._bad_inputs = set(self._bad_indices(first=True))

    def inputs(self) -> List[nn.Variable]:
        """The graph's inputs: its leaves that are neither parameters nor state (found once)."""
        if self._inputs is None:
            state = self._state() if self._state is not None else ()
            self._inputs = input_leaves(self.loss, self._params(), state)
        return self._inputs

    def checked_inputs(self) -> List[nn.Variable]:
        """The inputs checked for bad data: the graph's inputs but ``unchecked_inputs``."""
        if self._checked is None:
            skip = {hash(v) for v in self.unchecked_inputs}
            self._checked = [v for v in self.inputs() if hash(v) not in skip]
            self._ranges = input_ranges(self.loss, self._checked)
            self._bounded = [
                (i, r.center, r.radius) for i, r in enumerate(self._ranges) if r.bounded
            ]
        return self._checked

    def device_checked(self):
        """``(inputs, [(input, center, radius)] of the bounded ones)`` for the device check to
        read (none when checked on the host): bad when inf/NaN, the second also when
        ``|value - center| >= radius``."""
        if self.batch_on_host:
            return [], []
        inputs = self.checked_inputs()
        ranged = [(inputs[i].data, center, radius) for i, center, radius in self._bounded]
        return [v.data for v in inputs], ranged

    def _bad_indices(self, first: bool = False) -> List[int]:
        """Indices of the checked inputs bad as the graph sees them (host check; ``first``:
        the first only)."""
        inputs = self.checked_inputs()
        return bad_indices([v.data for v in inputs], self._ranges, first)

    def run(
        self, seed: float, replay: bool = False, keep: bool = False, count: bool = True, loss=None,
        hook=None,
    ) -> bool | None:  # fmt: skip
        """zero_grad and ``accum_grad`` rounds of ``loss`` (default the updater's) seeded with
        ``seed``. ``keep``: keep each round's inputs (``replay`` writes them back instead of
        calling the feeder); ``count``: add the rounds to ``passes`` and check the loss (and,
        unless ``replay``, the inputs); a probe or the float32 reference run counts nothing;
        ``hook``: the forward's ``function_post_hook`` (None: none).
        Returns whether every round's loss was finite when read on the host
        (:attr:`batch_on_host`), else None."""
        loss = self.loss if loss is None else loss
        keep = keep and self.accum_grad > 1 and self.data_feeder is not None
        if keep and not replay:
            self._kept = []
        read_loss = count and self.enabled and self.batch_on_host
        loss_finite = True if read_loss else None
        check_inputs = count and not replay and self.enabled and self.batch_on_host
        if check_inputs:
            self._bad_inputs = set()
            self._check_pending = self.accum_grad == 1  # checked when asked, if ever
            check_inputs = not self._check_pending
        self.solver.zero_grad()
        for v in self.inputs():
            if v.need_grad:
                v.grad.zero()
        for r in range(self.accum_grad):
            if not replay:
                if self.data_feeder is not None:
                    self.data_feeder()
                    self.counters.batches += 1
                if keep:
                    self._kept.append([copy_array(v.data) for v in self.inputs()])
                if check_inputs:
                    self._bad_inputs.update(self._bad_indices())
            elif keep:
                for v, saved in zip(self.inputs(), self._kept[r]):
                    restore_array(v, saved)
            loss.forward(clear_no_need_grad=self.clear_buffer, function_post_hook=hook)
            updater_forward()
            loss.backward(seed, clear_buffer=self.clear_buffer)
            if read_loss:  # after backward: read before it, it cost 0.8% of a 784-512-512-10 step
                loss_finite = self.loss_finite() and loss_finite
            self.counters.passes += count
        return loss_finite

    def loss_finite(self) -> bool:
        """Whether the loss is finite now (one host read)."""
        return bool(np.isfinite(host_view(self.loss.data)).all())

    def bad_input_names(self) -> List[str]:
        """The inputs that were bad, named by the function they feed and their shape, with the
        range they left (inf/NaN, or outside the values its readers take)."""
        leaves = self.checked_inputs()
        if self.batch_on_host and self.accum_grad > 1:
            bad = [i for i in range(len(leaves)) if i in self._bad_inputs]
        else:  # one round: read them now (still the step's)
            bad = self._bad_indices()
        names = describe_inputs(self.loss, [leaves[i] for i in bad])
        whys = [self._ranges[i].why for i in bad]
        return [f"{n}: inf/NaN{' or not ' + why if why else ''}" for n, why in zip(names, whys)]
