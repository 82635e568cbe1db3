"""A trace's forward headroom (NumPy only): the largest magnitude the float16 forward pass
produced at each step, and where (:class:`ForwardHeadroom`,
``probes=Probes(forward_headroom=True)``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..common.float16 import FORWARD_NEAR_FACTOR
from .group import Group


@dataclass(frozen=True)
class ForwardHeadroom(Group):
    """Per step, the float16 forward pass's largest |value| and the function that produced it
    (the fields of :class:`updater.trace.Trace` of these names).

    Attributes:
        forward_peak: float64 array ``(steps,)``: the largest |value| relative to 65504 (inf:
            inf/NaN; NaN: not measured).
        forward_where: tuple of ``steps`` str: the function (``<type>#<k>``;
            BatchNormalization's batch variance is marked; "": not measured).
    """

    forward_peak: np.ndarray
    forward_where: tuple

    KEY: ClassVar[str] = "forward"
    KINDS: ClassVar[dict] = {"forward_peak": "number", "forward_where": "text"}
    SHAPES: ClassVar[dict] = {"forward_peak": ("steps",), "forward_where": ("steps",)}

    @classmethod
    def checked(cls, trace, forward_peak, forward_where) -> ForwardHeadroom:
        if isinstance(forward_where, str):
            raise TypeError(f"forward_where must be a sequence of str, got {forward_where!r}")
        forward = cls(
            np.asarray(forward_peak, dtype=np.float64), tuple(str(w) for w in forward_where)
        )
        if (
            forward.forward_peak.shape != (trace.steps,)
            or len(forward.forward_where) != trace.steps
        ):
            raise ValueError(
                f"forward_peak and forward_where must both have {trace.steps} entries, got "
                f"{forward.forward_peak.shape} and {len(forward.forward_where)}"
            )
        if (forward.forward_peak < 0).any():
            raise ValueError("forward_peak must hold numbers >= 0 (NaN: not measured)")
        return forward

    def unmeasured(self, steps: int) -> ForwardHeadroom:
        return ForwardHeadroom(np.full(steps, np.nan), ("",) * steps)

    @classmethod
    def row_checked(cls, value) -> dict:
        """``(peak, where)`` of one step; ``ValueError`` unless the peak is >= 0."""
        peak, where = float(value[0]), str(value[1])
        if not peak >= 0:
            raise ValueError(f"forward_peak must be a number >= 0, got {peak!r}")
        return {"forward_peak": peak, "forward_where": where}

    @classmethod
    def unmeasured_row(cls, part: dict) -> dict:
        return {"forward_peak": np.nan, "forward_where": ""}

    @staticmethod
    def near(part: dict | None) -> bool:
        """Whether the step of ``part`` came within
        :data:`updater.common.float16.FORWARD_NEAR_FACTOR` of 65504 in its forward pass."""
        return part is not None and part["forward_peak"] >= 1 / FORWARD_NEAR_FACTOR
