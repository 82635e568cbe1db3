"""A trace's measured flushing curve (NumPy only): the share of nonzero gradient values float16
flushed to zero at a few scales (:class:`FlushCurve`, recorded with the updater's
``probes=Probes(flush=True)``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, List, Tuple

import numpy as np

from .group import Group


@dataclass(frozen=True)
class FlushCurve(Group):
    """Per step, the share of nonzero gradient values float16 flushed to zero, measured against
    a float32 computation of the step at ``K`` scales (the fields of
    :class:`updater.trace.Trace` of these names).

    Attributes:
        flush_scales: float64 array ``(steps, K)`` of finite scales > 0 (NaN: not measured).
        flush_shares: float64 array ``(steps, K)`` of shares in [0, 1] (NaN: not measured).
    """

    flush_scales: np.ndarray
    flush_shares: np.ndarray

    KEY: ClassVar[str] = "flush"
    KINDS: ClassVar[dict] = {"flush_scales": "number", "flush_shares": "number"}
    SHAPES: ClassVar[dict] = {"flush_scales": ("steps", None), "flush_shares": ("steps", None)}

    @classmethod
    def checked(cls, trace, flush_scales, flush_shares) -> FlushCurve:
        flush = cls(
            np.asarray(flush_scales, dtype=np.float64), np.asarray(flush_shares, dtype=np.float64)
        )
        shape = flush.flush_scales.shape
        if len(shape) != 2 or shape[0] != trace.steps or flush.flush_shares.shape != shape:
            raise ValueError(
                f"flush_scales and flush_shares must both have shape ({trace.steps}, K), got "
                f"{shape} and {flush.flush_shares.shape}"
            )
        scales = flush.flush_scales[~np.isnan(flush.flush_scales)]
        if not ((scales > 0) & (scales < np.inf)).all():
            raise ValueError(
                "flush_scales must hold finite scales > 0 (NaN: not measured), got "
                f"{scales[~((scales > 0) & (scales < np.inf))][0]!r}"
            )
        shares = flush.flush_shares[~np.isnan(flush.flush_shares)]
        if ((shares < 0) | (shares > 1)).any():
            raise ValueError("flush_shares must hold shares in [0, 1] (NaN: not measured)")
        return flush

    @property
    def width(self) -> int:
        """``K``, the scales measured per step."""
        return int(self.flush_scales.shape[1])

    def unmeasured(self, steps: int) -> FlushCurve:
        empty = np.full((steps, self.width), np.nan)
        return FlushCurve(empty, empty)

    @classmethod
    def stranger(cls, groups: List[FlushCurve | None]) -> Tuple[int, str] | None:
        """Curves of one width."""
        widths = [g.width for g in groups if g is not None]
        for i, g in enumerate(groups):
            if g is not None and g.width != widths[0]:
                return i, "flush curves of another width"
        return None

    def describe(self) -> str | None:
        return f"flush_scales={self.width}"

    @classmethod
    def row_checked(cls, value) -> dict:
        """``(scales, shares)`` of one step, float64 arrays ``(K,)``."""
        scales, shares = (np.asarray(a, dtype=np.float64) for a in value)
        return {"flush_scales": scales, "flush_shares": shares}

    @classmethod
    def unmeasured_row(cls, part: dict) -> dict:
        """NaN (steps without a measurement: bad batches)."""
        empty = np.full_like(part["flush_scales"], np.nan)
        return {"flush_scales": empty, "flush_shares": empty}
