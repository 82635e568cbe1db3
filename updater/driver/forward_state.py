"""The state a step writes (running statistics, ...): copied so that a skipped step, a retry or a
probe can put it back, and checked for inf/NaN.

The state is what nnabla's functions in the graph write among their inputs (BatchNormalization's
running mean and variance, ...: :func:`updater.driver.function_roles.state_inputs`), and the
``forward_state`` Variables the user gives (what a user's own function writes). A float16 batch
overflows BatchNormalization's variance in the forward pass even when the step's gradients are
finite (nnabla's cpu:half kernel sums x**2 over a channel's values in float16), and the
inference graph then divides by inf: the layer outputs its bias alone, silently.

:meth:`ForwardState.inspect` checks the state after an attempt's forward pass, before the
verdict (on the host, one view of their concatenation; or inside the device path's one graph
and host read): what is inf/NaN, and what of it this batch made inf/NaN (a value finite in the
copy taken before the batch), which :class:`updater.driver.attempts.Attempts` takes as a bad
batch whatever the gradients: skipped, not retried, the scale kept, the state put back. State
inf/NaN before the batch that stays so was not made by it. After every step whose state stays
(an applied step, and any step with ``restore_on_skip=False``), each statistic found inf/NaN is
reported once, by :meth:`step`: a warning naming it and the step, suggesting
``updater.amp.rewrite`` (which computes BatchNormalization in float32), or, with
``on_nonfinite_statistics="raise"``, :class:`NonFiniteStatisticsError`; the updater counts them
in ``nonfinite_statistics``.
"""

from __future__ import annotations

import logging
from typing import List, NamedTuple, Sequence

import nnabla as nn
import numpy as np

from .arrays import bad_indices, describe_inputs, grad_stats, host_view
from .checks import FiniteCheck, StepFacts
from .flat import FlatGraphs, SavedData, loss_context
from .function_roles import BACKWARD_STATE, FORWARD_STATE, state_inputs, writer_names
from .options import LiveOptions

logger = logging.getLogger(__name__)


class NonFiniteStatisticsError(FloatingPointError):
    """Raised by ``step()`` with ``on_nonfinite_statistics="raise"`` when a running statistic
    became inf/NaN; the step itself was applied.

    Attributes:
        names (list of str): the statistics found inf/NaN.
        step (int): the step after which they were.
    """

    def __init__(self, message, *, names, step):
        super().__init__(message)
        self.names = list(names)
        self.step = step


class StateCheck(NamedTuple):
    """:meth:`ForwardState.inspect` of the state after an attempt's forward pass.

    Attributes:
        nonfinite (list of Variable): the state holding inf/NaN.
        made (list of Variable): of those, what this batch's forward pass made inf/NaN (a
            bad batch, :func:`updater.driver.records.verdict`).
    """

    nonfinite: List[nn.Variable]
    made: List[nn.Variable]


def _made_nonfinite(before, now: nn.NdArray) -> bool:
    """Whether a value finite in ``before`` (the saved copy of a state array) is inf/NaN in
    ``now`` (its data after the forward pass); one host view of each."""
    if before is None:
        return False
    was = np.isfinite(host_view(before)).reshape(-1)
    return bool((was & ~np.isfinite(host_view(now)).reshape(-1)).any())


def statistic_names(loss, variables: List[nn.Variable]) -> List[str]:
    """Names of forward-written inputs: their name in nnabla's parameter registry, else the
    function they feed (:func:`updater.driver.arrays.describe_inputs`)."""
    registry = {hash(v): k for k, v in nn.get_parameters(grad_only=False).items()}
    described = describe_inputs(loss, variables)
    return [registry.get(hash(v), text) for v, text in zip(variables, described)]


class ForwardState:
    """The state a step writes (module doc): copies to put it back, and the report of the
    statistics that became inf/NaN.

    Args:
        options (LiveOptions): reads, at each use, ``loss`` (whose graph writes the state,
            found on first use), ``forward_state`` (state the graph does not show) and
            ``on_nonfinite_statistics`` ("warn" or "raise").
        check (FiniteCheck): asked whether it reads the state with the gradients
            (:attr:`~updater.driver.checks.base.FiniteCheck.reads_statistics`).
        counters (Counters): its ``nonfinite_statistics`` counts the reported ones.
    """

    def __init__(self, options: LiveOptions, check: FiniteCheck, counters):
        self.options = options
        self.check = check
        self.counters = counters
        self._written = None  # (the state, its FlatGraphs)
        self._reported: frozenset = frozenset()  # hashes of the statistics reported
        self._backward_only: frozenset | None = None  # hashes of what only a backward writes

    @property
    def loss(self) -> nn.Variable:
        """The loss (the option)."""
        return self.options.record.loss

    @property
    def given(self) -> Sequence[nn.Variable]:
        """The option ``forward_state``: state that the graph does not show."""
        return self.options.record.forward_state

    def _found(self):
        if self._written is None:
            found = {hash(v): v for v in [*state_inputs(self.loss), *self.given]}
            self._written = (list(found.values()), FlatGraphs(loss_context(self.loss)))
        return self._written

    @property
    def written(self) -> List[nn.Variable]:
        """The state: what the graph's functions write (found on first use), then ``given``;
        each once."""
        return self._found()[0]

    def save(self, slot: str) -> SavedData:
        """A copy of them (one concatenation), valid until the next copy into ``slot``."""
        written, graphs = self._found()
        return graphs.save(written, slot)

    def checked_with_gradients(self) -> List[nn.NdArray] | None:
        """The statistics for the check to read with the gradients; None when it does not read
        them (they are read on the host, :meth:`inspect`)."""
        return [v.data for v in self.written] if self.check.reads_statistics else None

    def nonfinite_indices(self, concatenated_first: bool = True) -> List[int]:
        """Indices into :attr:`written` of the state inf/NaN now, read on the host (the host
        fallback of :class:`~updater.driver.checks.base.HostReads`): with
        ``concatenated_first``, one view of their concatenation, and a view of each only when
        it is not finite; else (the check found one not finite) a view of each."""
        written, graphs = self._found()
        if not written:
            return []
        if concatenated_first:
            values = graphs.concatenated([v.data for v in written])
            if values is None or grad_stats([host_view(values)], False)[0][0]:
                return []
        return bad_indices([v.data for v in written])

    def inspect(self, facts: StepFacts, before: SavedData | None) -> StateCheck:
        """The state inf/NaN after this attempt's forward pass, and what of it the pass made
        inf/NaN (:class:`StateCheck`). With ``before`` (the copy taken before the batch, with
        ``restore_on_skip``): a state with a value finite in ``before`` and inf/NaN now, read
        only when some state is not finite; state already inf/NaN before the batch that stays
        so was not made by it. Without: the inf/NaN state not reported before. Never what only
        a backward pass writes (VATNoise's ``w``, inf when its backward overflowed)."""
        written = self.written
        bad = facts.statistics
        if not bad:
            return StateCheck(nonfinite=[], made=[])
        forward = [i for i in bad if hash(written[i]) not in self._backward_writes()]
        if before is None:
            made = [written[i] for i in forward if hash(written[i]) not in self._reported]
        else:
            pieces = before.pieces()
            made = [written[i] for i in forward if _made_nonfinite(pieces[i], written[i].data)]
        return StateCheck(nonfinite=[written[i] for i in bad], made=made)

    def _backward_writes(self) -> frozenset:
        """Hashes of the state only a backward pass writes (found on first use)."""
        if self._backward_only is None:
            forward = {hash(v) for v in [*state_inputs(self.loss, (FORWARD_STATE,)), *self.given]}
            backward = state_inputs(self.loss, (BACKWARD_STATE,))
            self._backward_only = frozenset(hash(v) for v in backward) - forward
        return self._backward_only

    def new_nonfinite(self, found: List[int], checked: StateCheck | None) -> List[nn.Variable]:
        """The statistics inf/NaN now and not reported before: from ``checked`` (the
        :meth:`inspect` of the state as it is now) when given, else ``found`` (indices into
        :attr:`written`: the step's :attr:`StepFacts.statistics
        <updater.driver.checks.base.StepFacts.statistics>`, or :meth:`nonfinite_indices`)."""
        if checked is None:
            written = self.written
            nonfinite = [written[i] for i in found]
        else:
            nonfinite = checked.nonfinite
        return [v for v in nonfinite if hash(v) not in self._reported]

    def describe(self, variables: List[nn.Variable]) -> List[str]:
        """``"<name> (written by <function>)"`` for each of ``variables``."""
        names = statistic_names(self.loss, variables)
        writers = writer_names(self.loss, variables)
        return [f"{n} (written by {w})" for n, w in zip(names, writers)]

    def report(self, variables: List[nn.Variable], step: int) -> None:
        """Warn about (or raise for) statistics that became inf/NaN after ``step``."""
        if not variables:
            return
        self._reported = self._reported | {hash(v) for v in variables}
        self.counters.nonfinite_statistics += len(variables)
        names = statistic_names(self.loss, variables)
        message = (
            f"running statistics became inf/NaN after step {step}: {', '.join(names)}. The "
            "inference graph (batch_stat=False) divides by them; a float16 batch overflows "
            "BatchNormalization's variance in the forward pass: updater.amp.rewrite(loss) "
            "computes BatchNormalization in float32"
        )
        if self.options.record.on_nonfinite_statistics == "raise":
            raise NonFiniteStatisticsError(message, names=names, step=step)
        logger.warning(message)
