"""nnabla arrays seen from NumPy: host views, the exact finite check, the fused unscaling pass,
copies and graph leaves.

``NdArray.get_data`` rebuilds nnabla's CPU context on every call (about 25-30 us in nnabla 1.39);
:func:`host_view` asks ``data_ptr`` for the pointer with a context made once (about 2 us). Every
read of an nnabla array into Python in :mod:`updater` goes through it, :func:`host_all_finite` or
:func:`finite_reader`
(the updater's gradient checks, its loss and agreement-flag reads,
:class:`updater.runtime.comm.MPICommunicator`), and :func:`host_reads` counts them: on a GPU each
is a device-to-host copy.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import math
import struct
import sys
from typing import Callable, Dict, List

import nnabla as nn
import numpy as np

_HOST_CONTEXT = None
_HOST_READS = 0


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
    nnabla call that writes or frees the array. Each call without ``write_only`` counts as one
    host read (:func:`host_reads`).
    """
    dtype = array_dtype(array) if dtype is None else np.dtype(dtype)
    pointer = _host_pointer(array, dtype, write_only)
    raw = (ctypes.c_char * (array.size * dtype.itemsize)).from_address(pointer)
    return np.frombuffer(raw, dtype=dtype)


def _host_pointer(array, dtype: np.dtype, write_only: bool) -> int:
    """The address of ``array``'s host memory as ``dtype`` (counted as a host read unless
    ``write_only``)."""
    global _HOST_READS
    _HOST_READS += not write_only
    return array.data_ptr(dtype, _HOST_CONTEXT or _host_context(), write_only)


_EXPONENT_BITS = {
    2: (ctypes.c_uint16, 0x7C00),
    4: (ctypes.c_uint32, 0x7F800000),
    8: (ctypes.c_uint64, 0x7FF0000000000000),
}
"""An IEEE float of so many bytes read as an unsigned word, and its exponent bits: all set
exactly when the value is inf or NaN."""


def host_all_finite(array) -> bool:
    """Whether every value of ``array`` is finite (one host read). A one-value float array (a
    loss) is read as one machine word whose exponent bits tell (:func:`finite_reader`),
    without a NumPy view and reduction or a Python float, which cost more right after a
    backward pass (``reports/benchmarks.md``, "Where an update's time goes")."""
    dtype = array_dtype(array)
    if array.size != 1:
        return bool(np.isfinite(host_view(array, dtype)).all())
    word = _word_reader(dtype)
    if word is not None:
        return word(array)
    raw = ctypes.string_at(_host_pointer(array, dtype, False), dtype.itemsize)  # as a number
    return math.isfinite(struct.unpack(dtype.char, raw)[0])


def finite_reader(array) -> Callable[[nn.NdArray], bool]:
    """:func:`host_all_finite` planned once for arrays of ``array``'s size and dtype (the loss,
    read every step): for one float value, the read alone (one machine word, its exponent
    bits); else :func:`host_all_finite` itself. The loss is read right after the backward
    pass, where each Python operation costs several times what it costs warm
    (docs/performance.md), so the planned read leaves out the dtype and size lookups."""
    word = _word_reader(array_dtype(array)) if array.size == 1 else None
    return host_all_finite if word is None else word


def _word_reader(dtype: np.dtype) -> Callable[[nn.NdArray], bool] | None:
    """Whether a one-value array of the float ``dtype`` is finite, read as one machine word
    whose exponent bits are all set exactly for inf and NaN (None: not such a float)."""
    if dtype.kind != "f" or dtype.itemsize not in _EXPONENT_BITS:
        return None
    word, exponent = _EXPONENT_BITS[dtype.itemsize]

    def finite(array) -> bool:
        return word.from_address(_host_pointer(array, dtype, False)).value & exponent != exponent

    return finite


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


def backward_seed(scale, seed_type, policy) -> float:
    """The value ``loss.backward(scale)`` really seeds with: ``scale`` rounded to ``seed_type``
    (the loss's precision); ``ValueError`` when it rounds to 0 (``policy`` has no floor)."""
    seed = float(seed_type(scale))
    if seed == 0:
        raise ValueError(
            f"loss scale {float(scale)!r} rounds to a backward seed of 0 in "
            f"{np.dtype(seed_type).name}; the policy {policy!r} has no floor: "
            "use one with min_scale >= 2**-24"
        )
    return seed


def on_cpu() -> bool:
    """True when gradients surely live in host memory: the current context is a CPU one and
    nnabla's CUDA extension is not loaded (a graph built in a GPU context scope would not show
    in the current context)."""
    backend = nn.get_current_context().backend
    cpu = bool(backend) and str(backend[0]).startswith("cpu")
    return cpu and "nnabla_ext.cuda" not in sys.modules


def host_reads() -> int:
    """How many host reads :func:`host_view` has made in this process (a counter for tests and
    benchmarks: take the difference around the code measured)."""
    return _HOST_READS


def _check_array(a: np.ndarray, need_absmax: bool):
    """``(finite, largest |value| or None)`` of one non-empty float array, exactly; the largest
    |value| is inf when not finite.

    float16: the bit patterns with the sign cleared, whose integer order is the order of
    |value| (patterns >= 0x7C00 are inf/NaN); no float16 arithmetic, so no false overflow.
    float32/float64: the smallest and the largest value (two passes without a temporary;
    NumPy's min and max propagate NaN, so both are finite exactly when every value is), whose
    larger magnitude is the largest |value|. (Not a dot product: the squares of small gradients
    are subnormal, which makes it some 30 times slower on x86.)
    """
    a = a.ravel()
    if a.itemsize == 2:  # float16
        top = np.bitwise_and(a.view(np.uint16), 0x7FFF).max()
        if top >= 0x7C00:
            return False, math.inf
        return True, (float(np.array(top, np.uint16).view(np.float16)) if need_absmax else None)
    low, high = float(np.minimum.reduce(a)), float(np.maximum.reduce(a))
    if not (math.isfinite(low) and math.isfinite(high)):
        return False, math.inf
    return True, (max(-low, high) if need_absmax else None)


def grad_stats(arrays: List[np.ndarray], need_absmax: bool = True):
    """Per-array finite flags and, if asked, the largest |value| of gradient arrays (exact; see
    :func:`_check_array`).

    Returns:
        ``(finite_flags list of bool, absmax float or None)``; absmax is inf when any value is
        non-finite and None when not measured.
    """
    flags = []
    absmax = 0.0
    for a in arrays:
        finite, top = _check_array(a, need_absmax) if a.size else (True, 0.0)
        flags.append(finite)
        if top is not None:
            absmax = max(absmax, top)
    if not need_absmax and all(flags):
        return flags, None
    return flags, absmax


def bad_indices(arrays, ranges=None, first: bool = False) -> List[int]:
    """Indices of the arrays among ``arrays`` (NdArrays) that hold inf/NaN, or, where
    ``ranges`` (one :class:`updater.driver.value_ranges.Range` per array, default none) is
    bounded, a value outside it: one host view each, its largest |value| for a bound on |x|
    (:func:`_check_array`, float16 by its bit patterns), else its smallest and largest value
    (NumPy's min and max propagate NaN; entry by entry for a range with entries:
    :meth:`~updater.driver.value_ranges.Range.outside`), exact for integers; an array of
    integers is never inf/NaN and is checked only against a range. ``first``: stop at the
    first found."""
    found = []
    for i, array in enumerate(arrays):
        bounds = ranges[i] if ranges is not None and ranges[i].bounded else None
        kind = array_dtype(array).kind
        if not array.size or kind not in "fiu" or (kind != "f" and bounds is None):
            continue
        a = host_view(array)
        if bounds is None or kind == "f" and bounds.symmetric:  # no bounds: a float array
            finite, top = _check_array(a, bounds is not None)
            bad = not finite or (bounds is not None and top >= bounds.high)
        else:  # by the range's own rule (entry by entry for OneHot's columns, ...)
            bad = bounds.outside(a.reshape(array.shape))
        if bad:
            found.append(i)
            if first:
                break
    return found


CHUNK = 2**16
"""Values per piece of a large gradient array in :func:`square_sum` and in :func:`unscale_grad`
when it sums squares (256 KiB of float32, so that a piece stays in the L2 cache from its check
or multiply to its sum of squares; the pieces set the order of the sum)."""
PASS_CHUNK = 2**18
"""Values per piece of a large gradient array in :func:`unscale_grad` when it only checks and
multiplies (1 MiB of float32): smaller pieces cost more in calls than they save in cache misses
on a gradient backward has just written (784-512-512-10 in cpu:float, interleaved right after
backward, medians: 679 us per update unsplit, 700 us in 2**18 pieces, 770 us in 2**16 pieces,
914 us for nnabla's ``check_inf_or_nan_grad`` and ``scale_grad``); larger ones would leave
the cache on very large arrays."""


def _pieces(a: np.ndarray, size: int = CHUNK):
    if a.size <= size:
        return (a,)
    return [a[start : start + size] for start in range(0, a.size, size)]


def square_sum(a: np.ndarray) -> float:
    """Sum of squares of float array ``a``: BLAS dot products in its own precision (float32 for
    float16), one per :data:`CHUNK` values, summed in float64; done again in float64 when that
    overflows with every value finite (inf/NaN when ``a`` holds them)."""
    a = a.ravel().astype(np.float32) if a.dtype == np.float16 else a.ravel()
    return _exact_square_sum(a, sum(float(np.dot(p, p)) for p in _pieces(a)))


def _exact_square_sum(a: np.ndarray, total: float) -> float:
    """``total``, or the float64 sum of squares when ``total`` overflowed but ``a`` is finite."""
    if not math.isfinite(total) and _check_array(a, False)[0]:
        wide = a.astype(np.float64)
        total = float(np.dot(wide, wide))
    return total


@functools.lru_cache(maxsize=4)
def _half_table(factor: float) -> np.ndarray:
    """float32 ``float32(h) * float32(factor)`` for every float16 bit pattern ``h``: the float16
    to float32 conversion and the multiply of ``solver.scale_grad`` in one look-up (256 KiB)."""
    values = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return values * np.float32(factor)


def unscale_grad(grad, factor: float, check=True, need_absmax=False, need_sumsq=False):
    """One pass over one gradient ``NdArray``: check it for inf/NaN (and measure its largest
    |value|) if asked, multiply it in place by ``factor``, and sum the squares of the result if
    asked; float32/float64 arrays piece by piece (:data:`PASS_CHUNK` values, :data:`CHUNK` when
    summing squares), each piece checked, multiplied and summed while in cache.

    The result equals ``solver.scale_grad(factor)`` bit for bit, and like it is float32: a
    float16 gradient (nnabla's half mode) is written back as float32 through a table look-up,
    so true gradients below float16's range are kept, and nnabla's solvers read that float32
    array as it is.

    Args:
        grad (nnabla.NdArray): the gradient, in host memory.
        factor (float): the multiplier (``1/seed`` to unscale).
        check (bool, default True): check for inf/NaN; exact, on the values before the multiply
            (after it when ``factor <= 1``, which keeps inf/NaN and finite values as they are).
        need_absmax (bool, default False): measure the largest |value| before the multiply.
        need_sumsq (bool, default False): sum the squares after the multiply (see
            :func:`square_sum`); only when finite.

    A gradient still lazily zero since ``solver.zero_grad()`` (``grad.zeroing``: no backward
    wrote it) is left untouched, so that nnabla's solvers still skip its parameter.

    Returns:
        ``(finite, absmax or None, sumsq or None)``; absmax is inf when not finite.
    """
    if grad.zeroing or not grad.size:
        return True, (0.0 if need_absmax else None), (0.0 if need_sumsq else None)
    a = host_view(grad)
    finite, absmax, sumsq = True, None, None
    if a.itemsize == 2:  # float16
        if check or need_absmax:
            finite, absmax = _check_array(a, need_absmax)
        bits = a.view(np.uint16).copy()  # the float32 view below may free the float16 memory
        a = host_view(grad, np.float32, write_only=True)
        np.take(_half_table(factor), bits, out=a)
        if need_sumsq and finite:
            sumsq = square_sum(a)
        return finite, absmax, sumsq
    before = need_absmax or (check and factor > 1)  # check the values as given
    after = check and not before  # check the results
    scale = a.dtype.type(factor)
    absmax = 0.0 if need_absmax else None
    total = 0.0
    for piece in _pieces(a, CHUNK if need_sumsq else PASS_CHUNK):
        if before:
            ok, top = _check_array(piece, need_absmax)
            finite = finite and ok
            absmax = max(absmax, top) if need_absmax else None
        np.multiply(piece, scale, out=piece)
        if need_sumsq:  # inf and NaN propagate into the sum: a finite sum is a finite piece
            total += float(np.dot(piece, piece))
        elif after:
            finite = finite and _check_array(piece, False)[0]
    if need_sumsq:
        sumsq = total if math.isfinite(total) else _exact_square_sum(a, total)
        finite = finite if not after else math.isfinite(sumsq)
    return finite, absmax, (sumsq if need_sumsq and finite else None)


def input_leaves(loss, params: Dict[str, nn.Variable], state=()) -> List[nn.Variable]:
    """Leaves of the graph of ``loss`` that are neither registered parameters, nor in ``params``
    (the solver's), nor in ``state`` (Variables the step writes): what a data feeder writes."""
    known = registered_parameters()
    known.update((hash(v), v) for v in itertools.chain(params.values(), state))
    return [v for v in graph_leaves(loss) if hash(v) not in known]


def describe_inputs(loss, inputs: List[nn.Variable]) -> List[str]:
    """Names for leaves of the graph of ``loss``: the first function each feeds (type and
    name), which input of it, and the shape."""
    wanted = {hash(v): v for v in inputs}
    found: Dict[int, str] = {}

    def visit(func):
        for i, v in enumerate(func.inputs):
            if hash(v) in wanted and hash(v) not in found:
                found[hash(v)] = f"input {i} of {func.info.type_name} '{func.name}'"

    loss.visit(visit)
    return [f"{found.get(hash(v), 'an input')} {tuple(v.shape)}" for v in inputs]
