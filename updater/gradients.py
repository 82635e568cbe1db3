"""One step's gradient work: the finite check, the largest |gradient|, the names of
non-finite parameters, and clip -> weight decay -> ``solver.update()``."""

from __future__ import annotations

import math
from typing import Dict, List, Sequence

import nnabla as nn
import numpy as np

from .arrays import grad_stats, host_view, on_cpu, sum_of_squares

NUMPY_CHECK_MIN_VALUES = 2**17
"""``finite_check="auto"`` on a CPU: the NumPy check from this many gradient values on."""


def choose_check(requested: str, reads_anyway: bool, n_values: int) -> str:
    """Resolve ``finite_check``: "numpy" or "solver" as given; "auto" picks one.

    Measured in training loops on CPU (nnabla 1.39): reading the gradients through data_ptr
    views plus one BLAS dot (float32) or bit test (float16) per array beats
    ``check_inf_or_nan_grad()`` from a few hundred thousand gradient values on (about 215 us
    against 370 us per step at 670k float32 values); below that, nnabla's single C++ call has
    less fixed per-array cost. NumPy is also used whenever the gradients are read anyway
    (``reads_anyway``: |g| max, clipping, recording); never off the CPU.
    """
    if requested != "auto":
        return requested
    if not on_cpu():
        return "solver"
    return "numpy" if reads_anyway or n_values >= NUMPY_CHECK_MIN_VALUES else "solver"


def host_grads(params: Dict[str, nn.Variable]) -> List[np.ndarray]:
    """Host views of every parameter's gradient, in ``params`` order."""
    return [host_view(p.grad) for p in params.values()]


def inspect_gradients(
    finite_check: str,
    solver,
    params: Dict[str, nn.Variable],
    need_absmax: bool,
    absmax_over: Sequence[nn.NdArray] | None = None,
):
    """Check the gradients of ``params`` (the solver's).

    Args:
        finite_check (str): "numpy" or "solver" (see :func:`choose_check`).
        solver: the nnabla solver (its ``check_inf_or_nan_grad`` for "solver").
        params (dict name -> Variable): the solver's current parameters.
        need_absmax (bool): measure the largest |gradient|.
        absmax_over (list of NdArray or None): measure it over these instead (the
            all-reduced gradients when only some are reduced).

    Returns:
        ``(host arrays or None, finite, absmax or None, names of non-finite params)``; absmax is
        inf when not finite.
    """
    if finite_check == "numpy":
        arrays = host_grads(params)
        flags, absmax = grad_stats(arrays, need_absmax)
        finite = all(flags)
        absmax = absmax if need_absmax else None
        if need_absmax and absmax_over:
            absmax = grad_stats([host_view(g) for g in absmax_over])[1]
    else:
        arrays, flags, absmax = None, None, None
        finite = not solver.check_inf_or_nan_grad()
        if need_absmax:
            absmax = _device_absmax(absmax_over or [p.grad for p in params.values()])
            absmax = absmax if finite else math.inf
    bad = []
    if not finite:
        if flags is None:
            flags = grad_stats(host_grads(params))[0]
        bad = [n for n, ok in zip(params, flags) if not ok]
    return arrays, finite, absmax, bad


def _device_absmax(grads: Sequence[nn.NdArray]) -> float:
    import nnabla.functions as F

    return max(float(F.max(F.abs(g)).get_data("r")) for g in grads if g.size)


def apply_update(solver, arrays, clip_grad_norm, weight_decay) -> None:
    """On unscaled gradients: clip their global L2 norm (measured on the host ``arrays``) to
    ``clip_grad_norm`` when it is not None, apply ``weight_decay``, then ``solver.update()``."""
    if clip_grad_norm is not None:
        norm = math.sqrt(sum_of_squares(arrays))
        if norm > clip_grad_norm:
            solver.scale_grad(clip_grad_norm / norm)
    if weight_decay is not None:
        solver.weight_decay(weight_decay)
    solver.update()
