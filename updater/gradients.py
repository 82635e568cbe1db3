"""One step's gradient work: the finite check (with the largest |gradient|, the sum of squares
and the names of non-finite parameters), unscaling, and clip -> weight decay ->
``solver.update()``.

Three paths, same decisions. "numpy" (CPU): host views of the gradients, one pass per array
(:func:`updater.arrays.unscale_grad`). "solver" (any device, the default off the CPU): one
nnabla graph over all gradients on their device (:class:`DeviceStats`) and one host read of its
small result per check; gradients never travel to the host and are scaled with
``solver.scale_grad``. "nnabla": ``solver.check_inf_or_nan_grad()`` and ``solver.scale_grad``,
two C++ calls, the cheapest on the CPU for small models that need only the finite flag.
"""

from __future__ import annotations

import contextlib
import math
from typing import Dict, List, NamedTuple, Sequence

import nnabla as nn
import numpy as np

from .arrays import array_dtype, grad_stats, host_view, on_cpu, square_sum, unscale_grad

TINY = 2.0**-126
"""Floor of the divisor in the device path's sum of squares (float32's smallest normal)."""
SMALL_MODEL_VALUES = 2**15
"""``finite_check="auto"`` on a CPU: "nnabla" below this many gradient values (flag only)."""


def choose_check(requested: str, flag_only: bool, n_values: int) -> str:
    """Resolve ``finite_check``: as given unless "auto". "auto" is "solver" off the CPU
    (gradients stay on the device); on the CPU "nnabla" for models under
    :data:`SMALL_MODEL_VALUES` gradient values whose steps need only the finite flag
    (``flag_only``: no |g| max, clipping or recorder), else "numpy".

    Measured in training loops on this project's 2-core machine (nnabla 1.39): right after
    nnabla's forward/backward every Python-level call is slow, so on small models two C++ calls
    beat a NumPy pass per array (a 64-64-10 MLP in cpu:half: 0.985x the bare loop against
    1.025x); from a few ten thousand values on the NumPy pass wins: in cpu:float it costs
    about what ``check_inf_or_nan_grad`` plus ``scale_grad`` cost (less at 2.8 million
    values) and much less than the device graph run on the CPU; in cpu:half its float32
    look-up replaces nnabla's slow float16 -> float32 conversion (a 128-512-10 MLP: 0.94x the
    bare loop, the graph 0.98x, nnabla's updater 1.00x).
    """
    if requested != "auto":
        return requested
    if not on_cpu():
        return "solver"
    return "nnabla" if flag_only and n_values < SMALL_MODEL_VALUES else "numpy"


def host_grads(params: Dict[str, nn.Variable]) -> list:
    """Host views of every parameter's gradient, in ``params`` order (one host read each); a
    gradient still lazily zero since ``solver.zero_grad()`` reads as zeros without touching it
    (a view would make it written, and nnabla's solvers would then update its parameter)."""
    return [_zeros(p.grad) if p.grad.zeroing else host_view(p.grad) for p in params.values()]


def _zeros(array) -> np.ndarray:
    return np.zeros(array.size, array_dtype(array))


class Inspection(NamedTuple):
    """What :func:`inspect_gradients` found.

    Attributes:
        arrays (list of numpy arrays or None): host views of the (scaled) gradients, when the
            "numpy" path read them without unscaling; else None.
        finite (bool): no gradient holds inf/NaN.
        absmax (float or None): largest |gradient| before unscaling (inf when not finite);
            None when not asked.
        bad (list of str): names of the parameters whose gradients hold inf/NaN.
        sumsq (float or None): sum of squares of the unscaled gradients, when asked and finite.
        loss_finite (bool or None): whether the loss is finite ("solver" path with a loss).
        unscaled (bool): the gradients were unscaled by the same pass.
    """

    arrays: list | None
    finite: bool
    absmax: float | None
    bad: List[str]
    sumsq: float | None
    loss_finite: bool | None
    unscaled: bool


def inspect_gradients(
    finite_check: str,
    solver,
    params: Dict[str, nn.Variable],
    need_absmax: bool,
    absmax_over: Sequence[nn.NdArray] | None = None,
    unscale_by: float | None = None,
    need_sumsq: bool = False,
    device: DeviceStats | None = None,
    loss: nn.Variable | None = None,
) -> Inspection:
    """Check the gradients of ``params`` (the solver's) for inf/NaN.

    Args:
        finite_check (str): "numpy", "solver" or "nnabla" (see :func:`choose_check`).
        solver: the nnabla solver (its ``check_inf_or_nan_grad`` for "nnabla").
        params (dict name -> Variable): the solver's current parameters.
        need_absmax (bool): measure the largest |gradient|.
        absmax_over (list of NdArray or None, default None): measure it over these instead
            (the all-reduced gradients when only some are reduced).
        unscale_by (float or None, default None): "numpy": also multiply every gradient by it
            in the same pass; "solver": the factor :func:`unscale_grads` will use (for
            ``sumsq``); "nnabla": unused.
        need_sumsq (bool, default False): the sum of squares of the gradients times
            ``unscale_by`` (needs ``unscale_by``; "nnabla" leaves it to the step).
        device (DeviceStats or None, default None): the graph of the "solver" path.
        loss (nnabla.Variable or None, default None): "solver": also check this loss.
    """
    loss_finite, sumsq, arrays = None, None, None
    if finite_check == "nnabla":
        finite = not solver.check_inf_or_nan_grad()
        flags, absmax = [True] * len(params), None
        if need_absmax or not finite:  # |g| max or the names: read the gradients
            arrays = host_grads(params)
            flags, absmax = grad_stats(arrays, need_absmax)
    elif finite_check == "numpy":
        top = None
        if need_absmax and absmax_over:
            top = grad_stats([host_view(g) for g in absmax_over])[1]
        own_absmax = need_absmax and top is None  # else |g| max is over absmax_over only
        if unscale_by is None:
            arrays = host_grads(params)
            flags, absmax = grad_stats(arrays, own_absmax)
        else:
            with _overflow_quiet(unscale_by):
                found = [
                    unscale_grad(p.grad, unscale_by, True, own_absmax, need_sumsq)
                    for p in params.values()
                ]
            flags = [f[0] for f in found]
            absmax = max((f[1] for f in found), default=0.0) if own_absmax else None
            if need_sumsq and all(flags):
                sumsq = sum(f[2] for f in found)
        absmax = absmax if top is None else top
    else:
        grads = [p.grad for p in params.values()]
        over = absmax_over if need_absmax and absmax_over else []
        stats = device.read(grads, over, need_absmax, need_sumsq, loss, unscale_by)
        flags = [count == 0 for count in stats.bad_counts]
        absmax, sumsq = stats.absmax, stats.sumsq
        if loss is not None:
            loss_finite = not stats.loss_bad
    finite = all(flags)
    absmax = (absmax if finite else math.inf) if need_absmax else None
    bad = [name for name, ok in zip(params, flags) if not ok]
    unscaled = finite_check == "numpy" and unscale_by is not None
    sumsq = sumsq if finite else None
    return Inspection(arrays, finite, absmax, bad, sumsq, loss_finite, unscaled)


def unscale_grads(finite_check: str, solver, params: Dict[str, nn.Variable], factor: float):
    """Multiply every gradient by ``factor``: NumPy on host views ("numpy", float32 like
    ``solver.scale_grad`` and equal to it bit for bit) or ``solver.scale_grad`` (the others)."""
    if finite_check == "numpy":
        with _overflow_quiet(factor):
            for p in params.values():
                unscale_grad(p.grad, factor, check=False)
    else:
        solver.scale_grad(factor)


def _overflow_quiet(factor: float):
    """Silence NumPy's overflow warning when ``factor > 1``: like ``solver.scale_grad``, a
    product beyond float32's range is inf, silently."""
    return np.errstate(over="ignore") if factor > 1 else contextlib.nullcontext()


def grad_sumsq(finite_check: str, params: Dict[str, nn.Variable], device: DeviceStats) -> float:
    """The sum of squares of the gradients as they are now (one host read on "solver")."""
    if finite_check != "solver":
        return sum(square_sum(a) for a in host_grads(params) if a.size)
    return device.read([p.grad for p in params.values()], [], False, True, None, 1.0).sumsq


def apply_update(solver, sumsq, clip_grad_norm, weight_decay) -> None:
    """On unscaled gradients: clip their global L2 norm ``sqrt(sumsq)`` to ``clip_grad_norm``
    with ``solver.scale_grad`` when it is not None, apply ``weight_decay``, then
    ``solver.update()``."""
    if clip_grad_norm is not None:
        norm = math.sqrt(sumsq)
        if norm > clip_grad_norm:
            solver.scale_grad(clip_grad_norm / norm)
    if weight_decay is not None:
        solver.weight_decay(weight_decay)
    solver.update()


# ---------------------------------------------------------------- the device path


class DeviceReading(NamedTuple):
    """One :meth:`DeviceStats.read`: per gradient the count of inf/NaN values; the largest
    |value| over the gradients (or over ``absmax_over`` when given; None when not asked); the
    sum of squares of the gradients times ``factor`` (None when not asked); whether the loss is
    inf/NaN (False without a loss)."""

    bad_counts: List[float]
    absmax: float | None
    sumsq: float | None
    loss_bad: bool


class DeviceStats:
    """One small nnabla graph over all gradients, on their own device, and one host read of its
    result (a vector of a few numbers per gradient) per :meth:`read`.

    Per gradient it computes the count of inf/NaN values (``F.isinf``, ``F.isnan``: exact,
    nnabla's ``F.max`` skips NaN) and, as asked, the largest |value| and the sum of squares of
    ``u = g * factor`` (the values ``solver.scale_grad(factor)`` will leave, bit for bit) as
    ``m**2 * sum((u / m)**2)`` with ``m`` the largest |u| (at least 2**-126), so that no square
    overflows. It runs in float32 (the "float" type config of ``context``'s backend), whatever
    the gradients' dtype. One graph is built per set of shapes and quantities asked,
    on first use; each read points its inputs at the current arrays.

    Args:
        context (nnabla Context): where the gradients live (e.g. the loss function's).
    """

    def __init__(self, context):
        from nnabla.ext_utils import get_extension_context

        self.context = get_extension_context(
            context.backend[0].split(":")[0], device_id=context.device_id, type_config="float"
        )
        self._graphs: dict = {}  # key -> (input Variables, output Variable)

    def read(self, grads, absmax_over, need_absmax, need_sumsq, loss, factor=1.0) -> DeviceReading:
        """Run the graph on ``grads`` (list of NdArray), ``absmax_over`` (list of NdArray, may be
        empty), ``loss`` (Variable or None) and ``factor`` (float, for the sum of squares); one
        host read."""
        full = [g for g in grads if g.size]
        arrays = [*full, *absmax_over] + ([] if loss is None else [loss.data])
        own_top = need_absmax and not absmax_over
        shapes = tuple(tuple(a.shape) for a in arrays)
        key = (shapes, len(full), own_top, need_sumsq, loss is not None)
        if key not in self._graphs:
            self._graphs[key] = self._build(*key)
        inputs, output = self._graphs[key]
        for var, array in zip(inputs, arrays):
            var.data = array
        if need_sumsq:
            inputs[-1].d = factor
        output.forward(clear_buffer=True)
        values = iter(host_view(output.data).tolist())
        counts, tops, sumsq = [], [], 0.0
        for g in grads:
            counts.append(next(values) if g.size else 0.0)
            tops.append(next(values) if g.size and own_top else 0.0)
            if g.size and need_sumsq:
                sumsq += max(next(values), TINY) ** 2 * next(values)
        tops += [next(values) for _ in absmax_over]
        loss_bad = loss is not None and next(values) > 0
        absmax = max(tops[len(grads) :] if absmax_over else tops, default=0.0)
        return DeviceReading(
            counts, absmax if need_absmax else None, sumsq if need_sumsq else None, loss_bad
        )

    def _build(self, shapes, n_grads, own_top, need_sumsq, with_loss):
        import nnabla.functions as F

        def bad_count(v):
            return F.sum(F.isinf(v) + F.isnan(v))

        parts = []
        with nn.context_scope(self.context):
            inputs = [nn.Variable(shape) for shape in shapes] + [nn.Variable((1,))]
            factor = inputs[-1]
            n_extra = len(shapes) - n_grads - with_loss
            for v in inputs[:n_grads]:
                parts.append(bad_count(v))
                if own_top:
                    parts.append(F.max(F.abs(v)))
                if need_sumsq:
                    ones = (1,) * len(v.shape)
                    u = F.mul2(v, F.reshape(factor, ones))
                    top = F.max(F.abs(u))
                    floor = F.reshape(F.maximum_scalar(top, TINY), ones)
                    parts += [top, F.sum(F.pow_scalar(F.div2(u, floor), 2.0))]
            parts += [F.max(F.abs(v)) for v in inputs[n_grads : n_grads + n_extra]]
            if with_loss:
                parts.append(bad_count(inputs[-2]))
            return inputs, F.concatenate(*[F.reshape(p, (1,)) for p in parts], axis=0)
