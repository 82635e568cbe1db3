"""The rounds of one attempt: ``solver.zero_grad()``, then ``accum_grad`` rounds of feed, forward
and ``backward(seed)``; the inputs of each round kept for a replay at another scale (a retry, a
probe); the loss and the inputs checked on the host (bad data), the inputs as the functions that
read them see them (:func:`updater.driver.value_ranges.input_ranges`): inf/NaN, a value beyond
float16's range where a half-precision function converts it, an index outside the table it
indexes (not a negative label a cross-entropy ignores).

Every attempt starts from zero gradients, of the parameters (``zero_grad``) and of the inputs
that have ``need_grad`` (an adversarial input's gradient), so that after a retried or probed
step each holds one attempt's backward."""

from __future__ import annotations

import operator
from typing import Callable, Dict, List, Set

import nnabla as nn

from .arrays import (
    bad_indices,
    copy_array,
    describe_inputs,
    finite_reader,
    input_leaves,
    restore_array,
)
from .checks import Extras, FiniteCheck
from .checks.base import NO_EXTRAS
from .options import LiveOptions
from .outside_forward import UPDATER_FORWARDS
from .value_ranges import Range, input_ranges

_NEEDS_GRAD = operator.attrgetter("need_grad")


class Rounds:
    """Runs the rounds of an attempt.

    Args:
        options (LiveOptions): reads, at each use, ``solver`` (zeroes the gradients), ``loss``,
            ``data_feeder`` (called before each forward of a new batch), ``accum_grad`` (rounds
            per attempt), ``clear_buffer``, ``enabled`` (loss scaling on, else no loss or input
            is read) and ``unchecked_inputs`` (left out of the bad-data check).
        check (FiniteCheck): asked whether it reads the loss and the inputs with the gradients
            (:meth:`~updater.driver.checks.base.FiniteCheck.reads_batch`).
        params (callable): returns the solver's parameters (to tell inputs from parameters).
        counters (Counters): ``batches`` and ``passes`` move here.
        state (callable or None, default None): returns the Variables the step writes
            (:class:`ForwardState`'s), which are state, not inputs: never checked nor replayed.
    """

    def __init__(
        self,
        options: LiveOptions,
        check: FiniteCheck,
        params: Callable[[], Dict[str, nn.Variable]],
        counters,
        state: Callable[[], list] | None = None,
    ):
        self.options = options
        self.check = check
        self._params = params
        self.counters = counters
        self._state = state
        self._inputs: List[nn.Variable] | None = None  # graph inputs, found on first use
        self._checked: List[nn.Variable] | None = None  # and those checked, with their ranges
        self._ranges: List[Range] = []
        self._bounded: list = []  # (index, low, high) of the bounded checked inputs
        self._kept: List[List[nn.NdArray]] = []  # per round, for a replay
        self._bad_inputs: Set[int] = set()  # indices of the inputs found bad (host check)
        self._check_pending = False  # the one round's inputs are checked when first asked
        self._loss_finite = True  # every loss of the last counted rounds, read on the host
        # the loss's read, planned at the first (its dtype is known once a forward pass ran)
        self._read_loss: Callable[[nn.NdArray], bool] = self._plan_loss_read
        # the loss and the inputs are checked on the host, each round (one read of the loss,
        # one pass over the inputs), unless the check reads them with the gradients
        self.batch_on_host = not check.reads_batch(options.record.accum_grad)

    @property
    def loss(self) -> nn.Variable:
        """The loss (the option)."""
        return self.options.record.loss

    @property
    def inputs_finite(self) -> bool:
        """No checked input was bad in the last rounds checked on the host: with one round, its
        inputs (still in place) are read when first asked, so a step whose gradients are
        finite, which asks nothing, reads none."""
        self._check_pending_round()
        return not self._bad_inputs

    def host_loss_finite(self) -> bool:
        """Whether every loss of the last counted rounds read on the host was finite (True when
        the check reads the loss: :attr:`batch_on_host` False)."""
        return self._loss_finite

    def host_inputs_finite(self) -> bool:
        """:attr:`inputs_finite` (for :class:`~updater.driver.checks.base.HostReads`)."""
        return self.inputs_finite

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
            skip = {hash(v) for v in self.options.record.unchecked_inputs}
            self._checked = [v for v in self.inputs() if hash(v) not in skip]
            self._ranges = input_ranges(self.loss, self._checked)
            self._bounded = [(i, r.bounds) for i, r in enumerate(self._ranges) if r.bounded]
        return self._checked

    def extras(self, statistics) -> Extras:
        """What the check reads with the gradients: the inputs and ``[(input, low, high)]`` of
        the bounded ones when it reads the batch (bad when inf/NaN, the second also outside
        ``(low, high)``), and ``statistics`` (the forward state's, or None)."""
        if self.batch_on_host:
            return NO_EXTRAS if statistics is None else Extras(statistics=statistics)
        inputs = self.checked_inputs()
        ranged = [(inputs[i].data, *bounds) for i, bounds in self._bounded]
        return Extras(inputs=[v.data for v in inputs], ranged=ranged, statistics=statistics)

    def _bad_indices(self, first: bool = False) -> List[int]:
        """Indices of the checked inputs bad as the graph sees them (host check; ``first``:
        the first only)."""
        inputs = self.checked_inputs()
        return bad_indices([v.data for v in inputs], self._ranges, first)

    def run(
        self,
        seed: float,
        replay: bool = False,
        keep: bool = False,
        count: bool = True,
        loss=None,
        hook=None,
    ) -> None:
        """zero_grad and ``accum_grad`` rounds of ``loss`` (default the updater's) seeded with
        ``seed``. ``keep``: keep each round's inputs (``replay`` writes them back instead of
        calling the feeder); ``count``: add the rounds to ``passes`` and check the loss on the
        host when the check does not read it (:attr:`batch_on_host`; the answer is
        :meth:`host_loss_finite`) (and, unless ``replay``, the inputs); a probe or the float32
        reference run counts nothing; ``hook``: the forward's ``function_post_hook`` (None:
        none)."""
        o = self.options.record
        loss = o.loss if loss is None else loss
        rounds, feeder, clear = o.accum_grad, o.data_feeder, o.clear_buffer
        keep = keep and rounds > 1 and feeder is not None
        if keep and not replay:
            self._kept = []
        on_host = o.enabled and self.batch_on_host
        read_loss = count and on_host
        if count:
            self._loss_finite = True
        check_inputs = count and not replay and on_host
        if check_inputs:
            self._bad_inputs = set()
            self._check_pending = rounds == 1  # checked when asked, if ever
            check_inputs = not self._check_pending
        o.solver.zero_grad()
        inputs = self._inputs if self._inputs is not None else self.inputs()
        for v in filter(_NEEDS_GRAD, inputs):
            v.grad.zero()
        for r in range(rounds):
            if replay:
                self._replay_round(r, inputs, keep)
            elif feeder is not None:
                feeder()
                self.counters.batches += 1
            if (keep or check_inputs) and not replay:
                self._kept_and_checked(inputs, keep, check_inputs)
            loss.forward(clear_no_need_grad=clear, function_post_hook=hook)
            UPDATER_FORWARDS[0] += 1
            loss.backward(seed, clear_buffer=clear)
            if read_loss:  # after backward: read before it, it cost 0.8% of a 784-512-512-10 step
                self._loss_finite = self._read_loss(loss.data) and self._loss_finite
            self.counters.passes += count

    def _plan_loss_read(self, array) -> bool:
        """The first read of the loss: plans the read for its size and dtype
        (:func:`updater.driver.arrays.finite_reader`; a new loss builds new rounds), then
        reads."""
        self._read_loss = finite_reader(array)
        return self._read_loss(array)

    def _replay_round(self, r: int, inputs, keep: bool) -> None:
        """Round ``r``'s ``inputs`` for a replay (:meth:`run`): the batch kept for it written
        back when ``keep`` (else the inputs are still the batch's)."""
        if keep:
            for v, saved in zip(inputs, self._kept[r]):
                restore_array(v, saved)

    def _kept_and_checked(self, inputs, keep: bool, check_inputs: bool) -> None:
        """After a round's feed (:meth:`run`): its ``inputs`` kept for a replay and checked on
        the host, as asked."""
        if keep:
            self._kept.append([copy_array(v.data) for v in inputs])
        if check_inputs:
            self._bad_inputs.update(self._bad_indices())

    def bad_input_names(self) -> List[str]:
        """The inputs that were bad, named by the function they feed and their shape, with the
        range they left (inf/NaN, or outside the values its readers take)."""
        leaves = self.checked_inputs()
        if self.batch_on_host and self.options.record.accum_grad > 1:
            bad = [i for i in range(len(leaves)) if i in self._bad_inputs]
        else:  # one round: read them now (still the step's)
            bad = self._bad_indices()
        names = describe_inputs(self.loss, [leaves[i] for i in bad])
        whys = [self._ranges[i].why for i in bad]
        return [f"{n}: inf/NaN{' or not ' + why if why else ''}" for n, why in zip(names, whys)]
