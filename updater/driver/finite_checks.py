"""The finite check of a step's gradients, one object per path (``finite_check=``), chosen once by
:func:`choose_check`: it finds whether they are finite (with the largest |gradient|, the sum of
squares and the names of non-finite parameters when asked), unscales them and measures their
sum of squares. No other module compares the path's name.

Three paths, same decisions:

- :class:`HostCheck`, "numpy" (CPU): host views. With few or large arrays (:func:`per_array`),
  one fused pass per array that checks and unscales it
  (:func:`updater.driver.arrays.unscale_grad`); with many small ones, one NumPy check of the
  concatenated gradients (:mod:`updater.driver.flat`: one nnabla function) and
  ``solver.scale_grad`` to unscale.
- :class:`DeviceCheck`, "solver" (any device, the default off the CPU): one nnabla graph over
  the concatenated gradients on their device (:class:`updater.driver.flat.DeviceStats`, a fixed
  number of functions) and one host read of its small result per check; gradients never travel
  to the host and are unscaled with ``solver.scale_grad``; the same read checks the loss, the
  batch's inputs and the running statistics (:attr:`FiniteCheck.checks_extras`).
- :class:`NnablaCheck`, "nnabla": ``solver.check_inf_or_nan_grad()`` and ``solver.scale_grad``,
  two C++ loops.

The names of the parameters whose gradients are not finite are read from the gradients when
first asked (:class:`NonFiniteNames`), on the two concatenating layouts.
"""

from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Sequence as SequenceABC
from typing import Callable, Dict, List, NamedTuple, Sequence

import nnabla as nn
import numpy as np

from .arrays import array_dtype, grad_stats, host_view, on_cpu, square_sum, unscale_grad
from .flat import DeviceStats, FlatGraphs, loss_context

_GRAD = operator.attrgetter("grad")
SMALL_MODEL_VALUES = 2**15
"""``finite_check="auto"`` on a CPU: "nnabla" below this many gradient values (flag only)."""
FEW_ARRAYS = 8
PER_ARRAY_VALUES = 2**15
"""The "numpy" path works array by array with at most :data:`FEW_ARRAYS` arrays or at least
this many values per array on average, else on the concatenated gradients."""


def per_array(n_arrays: int, n_values: int) -> bool:
    """Whether the "numpy" path works array by array: its Python and NumPy calls, about 10 us
    per array, are worth saving the copy of the concatenation only for few or large arrays."""
    return n_arrays <= FEW_ARRAYS or n_values >= PER_ARRAY_VALUES * n_arrays


def resolve_path(requested: str, flag_only: bool, n_values: int, n_arrays: int) -> str:
    """The path for ``finite_check=requested`` on ``n_values`` gradient values in ``n_arrays``
    arrays: as given unless "auto". "auto" is "solver" off the CPU
    (gradients stay on the device; a fixed number of nnabla functions and one host read per
    check, where ``check_inf_or_nan_grad`` waits for the device once per array). On the CPU, when
    steps need only the finite flag (``flag_only``: no |g| max, clipping or recorder), "numpy"
    for models of at least :data:`SMALL_MODEL_VALUES` values that it works array by array
    (:func:`per_array`), whose fused pass saves nnabla's second pass over large arrays, else
    "nnabla"; when steps read the gradients, "numpy".

    Measured in training loops on this project's 2-core machine (nnabla 1.39,
    ``reports/benchmarks.md``): on small models and on many arrays two C++ loops beat anything
    Python runs per array or the copy of a concatenation (a 64-64-10 MLP in cpu:half: 0.985x
    the bare loop against 1.025x); on a few large arrays the fused NumPy pass costs about what
    ``check_inf_or_nan_grad`` plus ``scale_grad`` cost, or less.
    """
    if requested != "auto":
        return requested
    if not on_cpu():
        return "solver"
    fused = per_array(n_arrays, n_values) and n_values >= SMALL_MODEL_VALUES
    return "nnabla" if flag_only and not fused else "numpy"


def choose_check(requested: str, flag_only: bool, sizes: List[int], solver, loss) -> FiniteCheck:
    """The check object of the path :func:`resolve_path` gives for gradient arrays of ``sizes``
    values, on the device of ``loss``'s last function."""
    n_values, n_arrays = sum(sizes), len(sizes)
    path = resolve_path(requested, flag_only, n_values, n_arrays)
    where = loss_context(loss)
    if path == "solver":
        return DeviceCheck(solver, loss, DeviceStats(where))
    if path == "nnabla":
        return NnablaCheck(solver)
    return HostCheck(solver, None if per_array(n_arrays, n_values) else FlatGraphs(where))


def _grads(params: Dict[str, nn.Variable]) -> List[nn.NdArray]:
    """The gradient arrays of ``params``, in order (one C-level loop)."""
    return list(map(_GRAD, params.values()))


def host_grads(params: Dict[str, nn.Variable]) -> list:
    """Host views of every parameter's gradient, in ``params`` order (one host read each); a
    gradient still lazily zero since ``solver.zero_grad()`` reads as zeros without touching it
    (a view would make it written, and nnabla's solvers would then update its parameter)."""
    return [_zeros(p.grad) if p.grad.zeroing else host_view(p.grad) for p in params.values()]


def _read_and_check(params: Dict[str, nn.Variable], need_absmax: bool):
    """``(host views, absmax or None, names of the non-finite)`` of the gradients of
    ``params``: :func:`host_grads` and the exact check of
    :func:`updater.driver.arrays.grad_stats`."""
    arrays = host_grads(params)
    flags, absmax = grad_stats(arrays, need_absmax)
    return arrays, absmax, [name for name, ok in zip(params, flags) if not ok]


def _zeros(array) -> np.ndarray:
    return np.zeros(array.size, array_dtype(array))


class NonFiniteNames(SequenceABC):
    """The names of the parameters in ``params`` whose gradients hold inf/NaN, read from the
    gradients (a host view of each) when first asked: valid while the gradients are the ones
    checked (the updater asks only before the next attempt)."""

    def __init__(self, params: Dict[str, nn.Variable]):
        self._params = params
        self._names: List[str] | None = None

    def _found(self) -> List[str]:
        if self._names is None:
            self._names = _read_and_check(self._params, False)[2]
        return self._names

    def __getitem__(self, index):
        return self._found()[index]

    def __len__(self) -> int:
        return len(self._found())

    def __eq__(self, other) -> bool:
        return isinstance(other, SequenceABC) and list(self) == list(other)

    def __repr__(self) -> str:
        return repr(self._found())


class Inspection(NamedTuple):
    """What :func:`inspect_gradients` found.

    Attributes:
        arrays (list of numpy arrays or None): host views of the (scaled) gradients, when the
            "numpy" path read them array by array without unscaling; else None.
        finite (bool): no gradient holds inf/NaN.
        absmax (float or None): largest |gradient| before unscaling (inf when not finite);
            None when not asked.
        bad (sequence of str): names of the parameters whose gradients hold inf/NaN.
        sumsq (float or None): sum of squares of the unscaled gradients, when asked and finite.
        loss_finite (bool or None): whether the loss is finite ("solver" path with a loss).
        unscaled (bool): the gradients were unscaled by the same pass.
        inputs_finite (bool or None): whether the ``inputs`` given hold no inf/NaN ("solver"
            path with inputs).
        statistics_finite (bool or None): the same for the ``statistics`` given.
    """

    arrays: list | None
    finite: bool
    absmax: float | None
    bad: Sequence[str]
    sumsq: float | None
    loss_finite: bool | None
    unscaled: bool
    inputs_finite: bool | None = None
    statistics_finite: bool | None = None


class FiniteCheck:
    """What every path shares; ``params`` arguments are callables returning the solver's
    current parameters (name -> Variable), read only when the path needs them.

    Attributes:
        name (str): the path's ``finite_check`` value.
        checks_extras (bool): :meth:`inspect` also checks the loss, ``inputs`` and
            ``statistics`` in its one read (the device path).
    """

    name = ""
    checks_extras = False

    def __init__(self, solver):
        self.solver = solver

    def inspect(
        self,
        params: Callable[[], Dict[str, nn.Variable]],
        need_absmax: bool,
        absmax_over: Sequence[nn.NdArray] = (),
        unscale_by: float | None = None,
        need_sumsq: bool = False,
        inputs: Sequence[nn.NdArray] = (),
        statistics: Sequence[nn.NdArray] = (),
        ranged: Sequence[nn.NdArray] = (),
    ) -> Inspection:
        """Check the gradients for inf/NaN.

        Args:
            params (callable): returns the solver's current parameters.
            need_absmax (bool): measure the largest |gradient|.
            absmax_over (list of NdArray, default ()): measure it over these instead (the
                all-reduced gradients when only some are reduced).
            unscale_by (float or None, default None): the factor :meth:`unscale` will use, for
                ``sumsq``; :class:`HostCheck` array by array unscales in the same pass.
            need_sumsq (bool, default False): the sum of squares of the gradients times
                ``unscale_by`` (:class:`NnablaCheck` leaves it to :meth:`sumsq`).
            inputs, statistics (lists of NdArray, default ()): also checked for inf/NaN when
                :attr:`checks_extras`.
            ranged (list of (NdArray, center, radius), default ()): inputs also checked
                against the values their readers take
                (:func:`updater.driver.function_roles.input_ranges`) when :attr:`checks_extras`.
        """
        found = self._inspect(params, need_absmax, absmax_over, unscale_by, need_sumsq, inputs,
                              statistics, ranged)  # fmt: skip
        finite = found.finite
        return found._replace(
            absmax=(found.absmax if finite else math.inf) if need_absmax else None,
            sumsq=found.sumsq if finite else None,
        )

    def unscale(self, params: Callable[[], Dict[str, nn.Variable]], factor: float) -> None:
        """Multiply every gradient by ``factor`` (``solver.scale_grad``)."""
        self.solver.scale_grad(factor)

    def sumsq(self, params: Callable[[], Dict[str, nn.Variable]]) -> float:
        """The sum of squares of the gradients as they are now."""
        return sum(square_sum(a) for a in host_grads(params()) if a.size)


class NnablaCheck(FiniteCheck):
    """ "nnabla": ``solver.check_inf_or_nan_grad()``; the gradients are read to the host only for
    |g| max or the names of non-finite parameters."""

    name = "nnabla"

    def _inspect(self, params, need_absmax, absmax_over, unscale_by, need_sumsq, inputs,
                 statistics, ranged) -> Inspection:  # fmt: skip
        finite, absmax, arrays, bad = not self.solver.check_inf_or_nan_grad(), None, None, []
        if need_absmax or not finite:  # |g| max or the names: read the gradients
            arrays, absmax, bad = _read_and_check(params(), need_absmax)
        return Inspection(arrays, finite, absmax, bad, None, None, False)


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

    @property
    def by_array(self) -> bool:
        """Whether it works array by array."""
        return self.flat is None

    def _inspect(self, params, need_absmax, absmax_over, unscale_by, need_sumsq, inputs,
                 statistics, ranged) -> Inspection:  # fmt: skip
        params = params()
        top, sumsq, arrays = None, None, None
        if need_absmax and absmax_over:
            top = grad_stats([host_view(g) for g in absmax_over])[1]
        own_absmax = need_absmax and top is None  # else |g| max is over absmax_over only
        if self.flat is not None:
            finite, absmax, sumsq = _check_concatenated(
                self.flat, params, own_absmax, unscale_by if need_sumsq else None
            )
            bad = [] if finite else NonFiniteNames(params)
        elif unscale_by is None:
            arrays, absmax, bad = _read_and_check(params, own_absmax)
            finite = not bad
        else:
            with _overflow_quiet(unscale_by):
                found = [
                    unscale_grad(p.grad, unscale_by, True, own_absmax, need_sumsq)
                    for p in params.values()
                ]
            bad = [name for name, f in zip(params, found) if not f[0]]
            finite = not bad
            absmax = max((f[1] for f in found), default=0.0) if own_absmax else None
            if need_sumsq and finite:
                sumsq = sum(f[2] for f in found)
        absmax = absmax if top is None else top
        unscaled = self.flat is None and unscale_by is not None
        return Inspection(arrays, finite, absmax, bad, sumsq, None, unscaled)

    def unscale(self, params, factor: float) -> None:
        """Array by array: NumPy on host views, float32 like ``solver.scale_grad`` and equal to
        it bit for bit; concatenated: ``solver.scale_grad``."""
        if self.flat is not None:
            self.solver.scale_grad(factor)
            return
        with _overflow_quiet(factor):
            for p in params().values():
                unscale_grad(p.grad, factor, check=False)

    def sumsq(self, params) -> float:
        """One host view of the concatenation, or one per array."""
        if self.flat is not None:
            return _check_concatenated(self.flat, params(), False, 1.0)[2]
        return super().sumsq(params)


class DeviceCheck(FiniteCheck):
    """ "solver": one nnabla graph over all gradients concatenated on their device
    (:class:`updater.driver.flat.DeviceStats`) and one host read of its small result; it checks
    the loss, the batch's inputs and the running statistics in the same read.

    Args:
        solver: the nnabla solver.
        loss (nnabla.Variable): the loss, checked with the gradients.
        flat (DeviceStats): the device graphs.
    """

    name = "solver"
    checks_extras = True

    def __init__(self, solver, loss, flat: DeviceStats):
        super().__init__(solver)
        self.loss = loss
        self.flat = flat

    def _inspect(self, params, need_absmax, absmax_over, unscale_by, need_sumsq, inputs,
                 statistics, ranged) -> Inspection:  # fmt: skip
        params = params()
        over = absmax_over if need_absmax and absmax_over else []
        stats = self.flat.read(
            _grads(params), over, need_absmax, need_sumsq, self.loss, unscale_by, inputs,
            statistics, ranged,
        )  # fmt: skip
        finite = stats.finite
        return Inspection(
            None, finite, stats.absmax, [] if finite else NonFiniteNames(params), stats.sumsq,
            not stats.loss_bad, False,
            not stats.inputs_bad if inputs else None,
            not stats.statistics_bad if statistics else None,
        )  # fmt: skip

    def sumsq(self, params) -> float:
        """The device graph's sum of squares, one host read."""
        return self.flat.read(_grads(params()), [], False, True, None, 1.0).sumsq


def _check_concatenated(flat: FlatGraphs, params, need_absmax: bool, factor: float | None):
    """``(finite, absmax or None, sumsq or None)`` of the gradients of ``params`` from one host
    view of their concatenation: the exact check of :func:`updater.driver.arrays.grad_stats`, and
    the sum of squares of ``g * factor`` in float32 (the values ``solver.scale_grad`` leaves)."""
    concatenated = flat.concatenated(_grads(params))
    if concatenated is None:  # no values
        return True, (0.0 if need_absmax else None), (0.0 if factor is not None else None)
    values = host_view(concatenated)
    flags, absmax = grad_stats([values], need_absmax)
    finite = flags[0]
    sumsq = None
    if factor is not None and finite:
        with _overflow_quiet(factor):
            sumsq = square_sum(values * np.float32(factor))
    return finite, absmax, sumsq


def _overflow_quiet(factor: float):
    """Silence NumPy's overflow warning when ``factor > 1``: like ``solver.scale_grad``, a
    product beyond float32's range is inf, silently."""
    return np.errstate(over="ignore") if factor > 1 else contextlib.nullcontext()
