"""nnabla arrays seen from NumPy: host views, the exact finite check, copies and graph leaves.

``NdArray.get_data`` rebuilds nnabla's CPU context on every call (about 25-30 us in nnabla 1.39);
:func:`host_view` asks ``data_ptr`` for the pointer with a context made once (about 2 us). The
updater's finite check and :class:`updater.comm.MPICommunicator` read gradients through it.
"""

from __future__ import annotations

import ctypes
import math
import sys
from typing import Dict, List

import nnabla as nn
import numpy as np

# |x| bit masks and the exponent-all-ones threshold (inf/NaN) for each float width.
_BITS = {
    2: (np.uint16, 0x7FFF, 0x7C00),
    4: (np.uint32, 0x7FFFFFFF, 0x7F800000),
    8: (np.uint64, 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000),
}
_HOST_CONTEXT = None


def _host_context():
    """nnabla's CPU context, made once."""
    global _HOST_CONTEXT
    if _HOST_CONTEXT is None:
        from nnabla_ext.cpu import context

        _HOST_CONTEXT = context()
    return _HOST_CONTEXT


def array_dtype(array) -> np.dtype:
    """Dtype of an NdArray; an array never written to yet reads as float32 (nnabla's default)."""
    try:
        return np.dtype(array.dtype)
    except RuntimeError:  # "Array is not initialized": no dtype until first use
        return np.dtype(np.float32)


def host_view(array, dtype=None, write_only: bool = False) -> np.ndarray:
    """A flat NumPy view of ``array``'s host memory (same memory as ``array.get_data()``).

    Args:
        array (nnabla.NdArray): the array.
        dtype (numpy dtype or None, default None): the view's dtype; None means the array's own
            (no cast). Another dtype makes nnabla convert the array to it.
        write_only (bool, default False): skip syncing the old values in (as ``get_data("w")``).

    The pointer is fetched on every call because nnabla may move an array's memory between
    steps (gradients get a new address each iteration), so a view is valid only until the next
    nnabla call that writes or frees the array.
    """
    dtype = array_dtype(array) if dtype is None else np.dtype(dtype)
    pointer = array.data_ptr(dtype, _host_context(), write_only)
    raw = (ctypes.c_char * (array.size * dtype.itemsize)).from_address(pointer)
    return np.frombuffer(raw, dtype=dtype)


def registered_parameters(scope=None) -> Dict[int, nn.Variable]:
    """Every Variable in nnabla's parameter registry (all scopes, need_grad or not), by hash."""
    found: Dict[int, nn.Variable] = {}
    for value in (nn.parameter.root_scope if scope is None else scope).values():
        if isinstance(value, dict):
            found.update(registered_parameters(value))
        else:
            found[hash(value)] = value
    return found


def graph_leaves(loss) -> List[nn.Variable]:
    """The Variables without a parent that feed the graph of ``loss``, each once."""
    found: Dict[int, nn.Variable] = {}

    def visit(func):
        for v in func.inputs:
            if v.parent is None:
                found.setdefault(hash(v), v)

    loss.visit(visit)
    return list(found.values())


def copy_array(array: nn.NdArray) -> nn.NdArray:
    """A copy of ``array`` on its own device and in its own dtype (on the host for an array
    that was only ever ``fill``-ed: nnabla fills lazily and cannot copy such an array)."""
    try:
        return nn.NdArray(array.shape).copy_from(array, use_current_context=False)
    except (RuntimeError, IndexError):  # nnabla 1.39 raises either, by fill state
        return nn.NdArray.from_numpy_array(np.array(array.data))


def restore_array(var: nn.Variable, saved: nn.NdArray) -> None:
    """Write ``saved`` back into ``var``'s data, reshaping ``var`` if a feeder changed its shape."""
    if tuple(var.shape) != tuple(saved.shape):
        var.reset_shape(saved.shape, force=True)
    var.data.copy_from(saved, use_current_context=False)


def seed_dtype(loss) -> type:
    """float16 when the function producing ``loss`` computes in half (its backward reads the
    seed as float16), else float32."""
    parent = loss.parent
    half = parent is not None and str(parent.context.backend[0]).endswith(":half")
    return np.float16 if half else np.float32


def on_cpu() -> bool:
    """True when gradients surely live in host memory: the current context is a CPU one and
    nnabla's CUDA extension is not loaded (a graph built in a GPU context scope would not show
    in the current context)."""
    backend = nn.get_current_context().backend
    cpu = bool(backend) and str(backend[0]).startswith("cpu")
    return cpu and "nnabla_ext.cuda" not in sys.modules


def grad_stats(arrays: List[np.ndarray], need_absmax: bool = True):
    """One pass over gradient arrays: per-array finite flags and, if asked, the largest |value|.

    float32/float64 arrays without ``need_absmax`` use one BLAS dot product (inf and NaN
    propagate into the sum of squares; a finite sum proves every value finite) and fall back to
    the exact bit test when the sum is not finite (a sum of huge finite squares can overflow).
    The bit test clears the sign bit: the integer order of the bits is then the order of |value|,
    and bits >= the exponent-all-ones pattern mean inf or NaN. Exact for every float width; no
    float16 arithmetic, so no false overflow.

    Returns:
        ``(finite_flags list of bool, absmax float or None)``; absmax is inf when any value is
        non-finite and None when not measured.
    """
    flags = []
    absmax = 0.0
    for a in arrays:
        if a.size == 0:
            flags.append(True)
            continue
        if not need_absmax and a.dtype != np.float16:
            flat = a.ravel()
            if math.isfinite(float(np.dot(flat, flat))):
                flags.append(True)
                continue
        uint, mask, inf_bits = _BITS[a.dtype.itemsize]
        top = np.bitwise_and(a.view(uint), uint(mask)).max()
        finite = bool(top < inf_bits)
        flags.append(finite)
        if not finite:
            absmax = math.inf
        elif need_absmax:
            absmax = max(absmax, float(np.array(top, dtype=uint).view(a.dtype)))
    if not need_absmax and all(flags):
        return flags, None
    return flags, absmax


def sum_of_squares(arrays: List[np.ndarray]) -> float:
    total = 0.0
    for a in arrays:
        flat = a.ravel().astype(np.float64)
        total += float(np.dot(flat, flat))
    return total


def input_leaves(loss, params: Dict[str, nn.Variable]) -> List[nn.Variable]:
    """Leaves of the graph of ``loss`` that are neither registered parameters nor in ``params``
    (the solver's): what a data feeder writes."""
    known = registered_parameters()
    known.update((hash(v), v) for v in params.values())
    return [v for v in graph_leaves(loss) if hash(v) not in known]


def copy_forward_state(loss) -> List[tuple]:
    """``(variable, copy)`` of the registered ``need_grad=False`` leaves of the graph of
    ``loss`` (running statistics and frozen weights): what a forward pass may move."""
    registered = registered_parameters()
    return [
        (v, copy_array(v.data))
        for v in graph_leaves(loss)
        if hash(v) in registered and not v.need_grad
    ]
