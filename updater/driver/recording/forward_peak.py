"""The float16 forward pass's headroom on a recorded step
(``Probes(forward_headroom=True)``): the largest magnitude a function of the forward
pass produced or accumulated, relative to 65504, and which function.

No loss scale causes or cures an overflow in the forward pass (BatchNormalization's running
variance going to inf, a large activation): it happens before the scale is applied. The measure
is a ``function_post_hook`` of ``loss.forward``: after each function it reads the function's
outputs on the host (no cast) and, for the kernels that accumulate, the largest sum they reach
(:data:`ACCUMULATED`). nnabla's CPU BatchNormalization (``forward_impl_batch`` in
``src/nbla/function/generic/batch_normalization.cpp``) sums ``x`` and ``x * x`` over the ``N``
values of a channel in the array's own type, so in ``cpu:half`` the sum of squares overflows
once ``N * E[x^2]`` passes 65504 while the batch variance stays small: the measure replays that
loop (same order, same float16 roundings). Mean's sum before the division and Softmax's
denominator (the sum of ``exp(x - max)``) are read from their outputs.
"""

from __future__ import annotations

from typing import Dict

import numpy as np

from ...common.float16 import FP16_MAX
from ..arrays import host_view


def _top(a: np.ndarray) -> float:
    """Largest |value| of ``a`` as a float (inf when it holds inf or NaN; 0 when empty)."""
    if a.size == 0:
        return 0.0
    top = float(np.max(np.abs(a)))
    return top if top == top else np.inf


def batch_norm_sums(f) -> float:
    """The largest |running sum| of ``x`` and of ``x * x`` that BatchNormalization's batch
    statistics loop reaches over any channel, in float16 and the kernel's order (as ``cpu:half``
    runs it; a float32 graph gets the float16 headroom it would have)."""
    x = f.inputs[0]
    axis = f.info.args["axes"][0]
    shape = x.shape
    size1 = shape[axis]
    values = host_view(x.data).reshape(int(np.prod(shape[:axis], dtype=np.int64)), size1, -1)
    per_channel = values.transpose(1, 0, 2).reshape(size1, -1).astype(np.float16)  # i0, i2
    with np.errstate(over="ignore", invalid="ignore"):  # each step rounded to float16
        sums = np.add.accumulate(per_channel, axis=1, dtype=np.float16)
        squares = np.add.accumulate(per_channel * per_channel, axis=1, dtype=np.float16)
    return max(_top(sums), _top(squares))


def _mean_sum(f) -> float:
    """Mean's sum before the division: the largest |output| times the values averaged."""
    out = host_view(f.outputs[0].data)
    count = max(1, f.inputs[0].size // max(1, out.size))
    return _top(out.astype(np.float64)) * count


def _softmax_denominator(f) -> float:
    """Softmax's largest denominator, sum of exp(x - max): 1 / the output at the maximum."""
    y = f.outputs[0]
    out = host_view(y.data).astype(np.float64).reshape(y.shape)
    if out.size == 0:
        return 0.0
    top = np.max(out, axis=f.info.args.get("axis", out.ndim - 1))
    with np.errstate(divide="ignore"):
        return _top(1.0 / top)


ACCUMULATED = {
    "BatchNormalization": ("sum of x^2", batch_norm_sums),
    "Mean": ("sum", _mean_sum),
    "Softmax": ("denominator", _softmax_denominator),
}
"""Function type -> (what accumulates, its largest magnitude from the function ``f`` just run).
BatchNormalization's applies with batch statistics only (training)."""


class ForwardPeak:
    """A ``function_post_hook`` keeping the largest magnitude of the forward pass since
    :meth:`reset` (an output's |value| or an accumulator's, :data:`ACCUMULATED`), relative to
    float16's largest finite value 65504, and where it was.

    Attributes:
        peak (float): the largest magnitude / 65504 seen (inf: an inf or NaN), 0.0 before any.
        where (str): the function that produced it, ``<type>#<k>`` (the k-th function of that
            type in the forward order), with the accumulator in parentheses, e.g.
            ``BatchNormalization#1 (sum of x^2)``.
    """

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        """Forget what was seen (call before each attempt)."""
        self.peak, self.where = 0.0, ""
        self._count: Dict[str, int] = {}  # functions seen, by type

    def _note(self, value: float, where: str) -> None:
        if value / FP16_MAX > self.peak:
            self.peak, self.where = value / FP16_MAX, where

    def __call__(self, f) -> None:
        kind = f.info.type_name
        self._count[kind] = k = self._count.get(kind, 0) + 1
        for out in f.outputs:
            self._note(_top(host_view(out.data)), f"{kind}#{k}")
        if kind in ACCUMULATED and f.info.args.get("batch_stat", True):
            what, measure = ACCUMULATED[kind]
            self._note(measure(f), f"{kind}#{k} ({what})")
