"""The float16 forward pass's headroom on a recorded step
(``GradientRecorder(forward_headroom=True)``): the largest |value| a function of the forward pass
produced, and which function.

No loss scale causes or cures an overflow in the forward pass (BatchNormalization's running
variance going to inf, a large activation): it happens before the scale is applied. The measure
is a ``function_post_hook`` of ``loss.forward``: after each function it reads the function's
outputs on the host (no cast) and, for BatchNormalization with batch statistics, the batch
variance of its input (per channel, computed in float64), which feeds the running variance.
"""

from __future__ import annotations

import numpy as np

from ..common.float16 import FP16_MAX
from .arrays import host_view


def _absmax(array) -> float:
    """Largest |value| of an nnabla array (inf when it holds inf or NaN)."""
    view = host_view(array)
    if view.size == 0:
        return 0.0
    top = float(np.max(np.abs(view)))
    return top if top == top else np.inf


class ForwardPeak:
    """A ``function_post_hook`` keeping the largest |value| of the forward pass since
    :meth:`reset`, relative to float16's largest finite value 65504, and where it was.

    Attributes:
        peak (float): the largest |value| / 65504 seen (inf: an inf or NaN), 0.0 before any.
        where (str): the function that produced it, ``<type>#<k>`` (the k-th function of that
            type in the forward order), with `` (batch variance)`` for BatchNormalization's.
    """

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        """Forget what was seen (call before each attempt)."""
        self.peak, self.where, self._count = 0.0, "", {}

    def _note(self, value: float, where: str) -> None:
        if value / FP16_MAX > self.peak:
            self.peak, self.where = value / FP16_MAX, where

    def __call__(self, f) -> None:
        kind = f.info.type_name
        self._count[kind] = k = self._count.get(kind, 0) + 1
        for out in f.outputs:
            self._note(_absmax(out.data), f"{kind}#{k}")
        args = f.info.args
        if kind == "BatchNormalization" and args.get("batch_stat", True):
            x = f.inputs[0]
            values = host_view(x.data).astype(np.float64).reshape(x.shape)
            axes = tuple(i for i in range(values.ndim) if i not in args["axes"])
            with np.errstate(invalid="ignore", over="ignore"):
                var = float(np.max(values.var(axis=axes)))
            self._note(var if var == var else np.inf, f"{kind}#{k} (batch variance)")
