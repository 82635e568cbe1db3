"""What every finite-check path shares: the request (:class:`Ask`), what a path reads besides the
gradients (:class:`Extras`), what a path's own read found (:class:`Findings`, with
:data:`NOT_CHECKED` for what it leaves to the host, never seen outside this package), the host
reads a path falls back on (:class:`HostReads`), the one record of an attempt's facts that
:meth:`FiniteCheck.facts` answers (:class:`StepFacts`), the base class :class:`FiniteCheck`, and
the host reads of the gradients the paths share."""

from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass
from typing import Callable, Dict, List, NamedTuple, Sequence

import nnabla as nn
import numpy as np

from ..arrays import array_dtype, grad_stats, host_view, square_sum

_GRAD = operator.attrgetter("grad")


class NotChecked:
    """The value of a :class:`Findings` fact that the path did not check (the rounds or the
    forward state check it on the host). It has no truth value: reading it as a bool raises."""

    def __bool__(self):
        raise TypeError("a fact this finite-check path did not check has no truth value")

    def __repr__(self) -> str:
        return "NOT_CHECKED"


NOT_CHECKED = NotChecked()
"""The one :class:`NotChecked` value."""


class Ask(NamedTuple):
    """What a step asks of the check besides whether the gradients are finite.

    Attributes:
        need_absmax (bool): measure the largest |gradient|.
        absmax_over (list of NdArray, default ()): measure it over these instead (the
            all-reduced gradients when only some are reduced).
        unscale_by (float or None, default None): the factor :meth:`FiniteCheck.unscale` will
            use, for ``sumsq``; the "numpy" path array by array unscales in the same pass, the
            "nnabla" path with ``scale_grad`` right after its check (finite gradients only).
        need_sumsq (bool, default False): the sum of squares of the gradients times
            ``unscale_by`` (the "nnabla" path leaves it to :meth:`FiniteCheck.sumsq`).
    """

    need_absmax: bool
    absmax_over: Sequence[nn.NdArray] = ()
    unscale_by: float | None = None
    need_sumsq: bool = False


class Extras(NamedTuple):
    """What a path that reads more than the gradients reads with them (given only when the path
    says it reads them: :meth:`FiniteCheck.reads_batch`, :attr:`FiniteCheck.reads_statistics`).

    Attributes:
        inputs (list of NdArray or None): the batch's checked inputs, read with the loss; None:
            the batch is not read here.
        ranged (list of (NdArray, *bounds)): the inputs also checked against the values
            their readers take (:attr:`updater.driver.value_ranges.Range.bounds` of
            :func:`updater.driver.value_ranges.input_ranges`).
        statistics (list of NdArray or None): the state the forward pass writes; None: not read
            here.
    """

    inputs: Sequence[nn.NdArray] | None = None
    ranged: Sequence = ()
    statistics: Sequence[nn.NdArray] | None = None


NO_EXTRAS = Extras()


class Findings(NamedTuple):
    """What an attempt's finite check found; each of the last three facts is
    :data:`NOT_CHECKED` when the path leaves it to the host.

    Attributes:
        arrays (list of numpy arrays or None): host views of the (scaled) gradients, when the
            "numpy" path read them array by array without unscaling; else None.
        finite (bool): the gradients are finite (no inf/NaN).
        absmax (float or None): largest |gradient| before unscaling (inf when not finite);
            None when not asked.
        bad (sequence of str): names of the parameters whose gradients hold inf/NaN.
        sumsq (float or None): sum of squares of the unscaled gradients, when asked and finite.
        unscaled (bool): the gradients were unscaled by the same pass.
        loss_finite (bool or NOT_CHECKED): the loss is finite.
        inputs_in_range (bool or NOT_CHECKED): no checked input is bad (inf/NaN, or outside
            the values its readers take).
        statistics_finite (bool or NOT_CHECKED): no state the forward pass writes is inf/NaN.
    """

    arrays: list | None
    finite: bool
    absmax: float | None
    bad: Sequence[str]
    sumsq: float | None
    unscaled: bool = False
    loss_finite: bool | NotChecked = NOT_CHECKED
    inputs_in_range: bool | NotChecked = NOT_CHECKED
    statistics_finite: bool | NotChecked = NOT_CHECKED


@dataclass(frozen=True)
class HostReads:
    """What the host reads for a path that leaves the loss, the inputs or the statistics to it
    (:attr:`FiniteCheck.reads_batch`, :attr:`FiniteCheck.reads_statistics`).

    Attributes:
        loss_finite (callable): ``() -> bool``, every round's loss was finite (read by the
            rounds, on the host, as they ran).
        inputs_finite (callable): ``() -> bool``, no checked input was bad (read when asked).
        nonfinite_statistics (callable or None): ``(concatenated_first: bool) -> list of
            int``, the indices of the state the forward pass writes that hold inf/NaN now; with
            ``concatenated_first`` one view of their concatenation first, the arrays one by one
            only when it is not finite. None: the graph writes no state.
    """

    loss_finite: Callable[[], bool]
    inputs_finite: Callable[[], bool]
    nonfinite_statistics: Callable[[bool], List[int]] | None


@dataclass(frozen=True, kw_only=True)
class StepFacts:
    """The facts of an attempt, one record from one call (:meth:`FiniteCheck.facts`): what the
    path read with the gradients, the rest read on the host (:class:`HostReads`).

    Attributes:
        finite (bool): the gradients are finite (no inf/NaN).
        absmax (float or None): largest |gradient| before unscaling (inf when not finite);
            None when not asked.
        bad (sequence of str): names of the parameters whose gradients hold inf/NaN (read when
            first asked).
        sumsq (float or None): sum of squares of the unscaled gradients, when asked and finite.
        unscaled (bool): the gradients were unscaled by the same pass.
        arrays (list of numpy arrays or None): host views of the (scaled) gradients, when the
            "numpy" path read them array by array without unscaling; else None.
        loss_finite (bool): every round's loss is finite.
        inputs_in_range (bool): no checked input is bad (inf/NaN, or outside the values its
            readers take); read on the host only when the gradients are not finite (the
            verdict reads it only then), True otherwise.
        statistics (sequence of int): indices of the state the forward pass writes holding
            inf/NaN (:attr:`updater.driver.forward_state.ForwardState.written`), read on the host
            when first asked unless the path read them clean.
    """

    finite: bool
    absmax: float | None
    bad: Sequence[str]
    sumsq: float | None
    unscaled: bool
    arrays: list | None
    loss_finite: bool
    inputs_in_range: bool
    statistics: Sequence[int]


class FiniteCheck:
    """What every path shares; ``params`` arguments are callables returning the solver's
    current parameters (name -> Variable), read only when the path needs them. A path is a
    subclass in a module of its own under :mod:`updater.driver.checks`, with its ``name`` (the
    ``finite_check`` value), a :meth:`build` classmethod and ``_inspect``.

    Attributes:
        name (str): the path's ``finite_check`` value.
        reads_statistics (bool): :meth:`inspect` also checks the forward state's values
            (``Extras.statistics``) in its one read.
    """

    name = ""
    reads_statistics = False

    def __init__(self, solver):
        self.solver = solver

    @classmethod
    def build(cls, solver, loss, sizes: List[int]) -> FiniteCheck:
        """The check for ``solver``'s gradient arrays of ``sizes`` values, the graph of
        ``loss``."""
        return cls(solver)

    def reads_batch(self, rounds: int) -> bool:
        """Whether :meth:`inspect` also checks the loss and the batch's inputs
        (``Extras.inputs``) in its one read, for attempts of ``rounds`` rounds (else the
        rounds check them on the host, each round)."""
        return False

    def inspect(
        self,
        params: Callable[[], Dict[str, nn.Variable]],
        ask: Ask,
        extras: Extras = NO_EXTRAS,
    ) -> Findings:
        """Check the gradients for inf/NaN, with what ``ask`` asks, and ``extras`` when the
        path reads them."""
        found = self._inspect(params, ask, extras)
        finite = found.finite
        if finite and (ask.need_absmax or found.absmax is None):
            return found  # as it is: what follows would replace nothing
        return found._replace(
            absmax=(found.absmax if finite else math.inf) if ask.need_absmax else None,
            sumsq=found.sumsq if finite else None,
        )

    def facts(
        self,
        params: Callable[[], Dict[str, nn.Variable]],
        ask: Ask,
        extras: Extras,
        host: HostReads,
    ) -> StepFacts:
        """The attempt's facts (:class:`StepFacts`): :meth:`inspect`, and ``host`` for what the
        path leaves to the host."""
        found = self.inspect(params, ask, extras)
        finite, loss, inputs = found.finite, found.loss_finite, found.inputs_in_range
        loss_finite = host.loss_finite() if isinstance(loss, NotChecked) else loss
        if isinstance(inputs, NotChecked):  # read only when the verdict reads it
            inputs_in_range = finite or host.inputs_finite()
        else:
            inputs_in_range = inputs
        statistics: Sequence[int] = ()
        read, clean = host.nonfinite_statistics, found.statistics_finite
        if read is not None and (isinstance(clean, NotChecked) or not clean):
            concatenated_first = isinstance(clean, NotChecked)  # read when first asked
            statistics = ReadWhenAsked(lambda: read(concatenated_first))
        return StepFacts(
            finite=finite,
            absmax=found.absmax,
            bad=found.bad,
            sumsq=found.sumsq,
            unscaled=found.unscaled,
            arrays=found.arrays,
            loss_finite=loss_finite,
            inputs_in_range=inputs_in_range,
            statistics=statistics,
        )

    def _inspect(self, params, ask: Ask, extras: Extras) -> Findings:
        raise NotImplementedError

    def unscale(self, params: Callable[[], Dict[str, nn.Variable]], factor: float) -> None:
        """Multiply every gradient by ``factor`` (``solver.scale_grad``)."""
        self.solver.scale_grad(factor)

    def sumsq(self, params: Callable[[], Dict[str, nn.Variable]]) -> float:
        """The sum of squares of the gradients as they are now."""
        return sum(square_sum(a) for a in host_grads(params()) if a.size)


def grads_of(params: Dict[str, nn.Variable]) -> List[nn.NdArray]:
    """The gradient arrays of ``params``, in order (one C-level loop)."""
    return list(map(_GRAD, params.values()))


def host_grads(params: Dict[str, nn.Variable]) -> list:
    """Host views of every parameter's gradient, in ``params`` order (one host read each); a
    gradient still lazily zero since ``solver.zero_grad()`` reads as zeros without touching it
    (a view would make it written, and nnabla's solvers would then update its parameter)."""
    return [_zeros(p.grad) if p.grad.zeroing else host_view(p.grad) for p in params.values()]


def read_and_check(params: Dict[str, nn.Variable], need_absmax: bool):
    """``(host views, absmax or None, names of the non-finite)`` of the gradients of
    ``params``: :func:`host_grads` and the exact check of
    :func:`updater.driver.arrays.grad_stats`."""
    arrays = host_grads(params)
    flags, absmax = grad_stats(arrays, need_absmax)
    return arrays, absmax, [name for name, ok in zip(params, flags) if not ok]


def _zeros(array) -> np.ndarray:
    return np.zeros(array.size, array_dtype(array))


class ReadWhenAsked(SequenceABC):
    """A list that ``read()`` makes when first asked: valid while what it reads is the attempt's
    (the updater asks only before the next attempt)."""

    def __init__(self, read: Callable[[], list]):
        self._read = read
        self._names: list | None = None

    def _found(self) -> list:
        if self._names is None:
            self._names = self._read()
        return self._names

    def __getitem__(self, index):
        return self._found()[index]

    def __len__(self) -> int:
        return len(self._found())

    def __eq__(self, other) -> bool:
        return isinstance(other, SequenceABC) and list(self) == list(other)

    def __repr__(self) -> str:
        return repr(self._found())


def non_finite_names(params: Dict[str, nn.Variable]) -> ReadWhenAsked:
    """The names of the parameters in ``params`` whose gradients hold inf/NaN, read from the
    gradients (a host view of each) when first asked."""
    return ReadWhenAsked(lambda: read_and_check(params, False)[2])


def overflow_quiet(factor: float):
    """Silence NumPy's overflow warning when ``factor > 1``: like ``solver.scale_grad``, a
    product beyond float32's range is inf, silently."""
    return np.errstate(over="ignore") if factor > 1 else contextlib.nullcontext()
