"""A trace's overflow thresholds (NumPy only): the scale from which each step overflows, the
largest scale it was seen finite at, and whether probes measured them (:class:`Thresholds`;
their rule, :func:`updater.trace.measured.below_overflow`, is a recorded step's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, List

import numpy as np

from .group import Group
from .measured import below_overflow


@dataclass(frozen=True)
class Thresholds(Group):
    """Per step, what is known of the scales at which it overflows (the fields of
    :class:`updater.trace.Trace` of these names).

    Attributes:
        overflow_scale: float64 array ``(steps,)``, > 0: the smallest loss scale at which the
            step was seen to overflow; inf where it never was.
        finite_scale: float64 array ``(steps,)``, >= 0 and below ``overflow_scale``: the largest
            scale at which the step was seen finite; 0 where not known. With ``overflow_scale``
            inf it marks a censored step (finite up to it, nothing known above).
        overflow_probed (bool): probes measured ``overflow_scale``.
    """

    overflow_scale: np.ndarray
    finite_scale: np.ndarray
    overflow_probed: bool = False

    PROBED: ClassVar[bool] = False
    KEY: ClassVar[str] = "thresholds"
    KINDS: ClassVar[dict] = {"overflow_scale": "number", "finite_scale": "number"}
    SHAPES: ClassVar[dict] = {"overflow_scale": ("steps",), "finite_scale": ("steps",)}

    @classmethod
    def of(cls, trace, given: dict) -> Thresholds:
        """Each field given or its default: ``overflow_scale`` all inf, ``finite_scale`` all 0,
        ``overflow_probed`` False."""
        steps = trace.steps
        over, finite = given.get("overflow_scale"), given.get("finite_scale")
        return cls.checked(
            trace,
            overflow_scale=np.full(steps, np.inf) if over is None else over,
            finite_scale=np.zeros(steps) if finite is None else finite,
            overflow_probed=bool(given.get("overflow_probed", False)),
        )

    @classmethod
    def checked(cls, trace, overflow_scale, finite_scale, overflow_probed=False) -> Thresholds:
        over = np.array(overflow_scale, dtype=np.float64)
        finite = np.array(finite_scale, dtype=np.float64)
        for name, a in (("overflow_scale", over), ("finite_scale", finite)):
            if a.shape != (trace.steps,):
                raise ValueError(f"{name} must have shape ({trace.steps},), got {a.shape}")
        if not (over > 0).all():  # also catches NaN
            raise ValueError(
                f"overflow_scale must hold numbers > 0 (inf where the step never overflowed), "
                f"got {over[~(over > 0)][0]!r}"
            )
        ok = below_overflow(finite, over)
        if not ok.all():
            t = int(np.flatnonzero(~ok)[0])
            raise ValueError(
                f"finite_scale must hold numbers >= 0 (0: not known) below overflow_scale, got "
                f"{finite[t]!r} at step {t} (overflow_scale {over[t]!r})"
            )
        return cls(over, finite, bool(overflow_probed))

    @property
    def censored(self) -> np.ndarray:
        """Steps seen finite at the highest scale probed and never overflowing: "above
        ``finite_scale``"."""
        return np.isinf(self.overflow_scale) & (self.finite_scale > 0)

    @property
    def known(self) -> np.ndarray:
        """Steps with a recorded overflow scale or a scale seen finite."""
        return (self.finite_scale > 0) | np.isfinite(self.overflow_scale)

    @classmethod
    def read(cls, z) -> dict:
        found = super().read(z)
        if "overflow_probed" in z:
            found["overflow_probed"] = z.scalar("overflow_probed", "bool")
        return found

    @classmethod
    def concat(cls, traces: List) -> Thresholds:
        """Probed only if every trace is."""
        return cls(
            np.concatenate([t.overflow_scale for t in traces]),
            np.concatenate([t.finite_scale for t in traces]),
            all(t.overflow_probed for t in traces),
        )

    def describe(self) -> str | None:
        return f"overflow_scale={'probed' if self.overflow_probed else 'seen'}"

    @classmethod
    def row_part(cls, step, arrays, layer_names) -> dict:
        """Every step's: its overflow scale (at most its own ``scale`` when its gradients
        overflowed there, :meth:`updater.trace.measured.MeasuredStep.reduced`), the scale it
        was seen finite at and whether probes measured them."""
        return {
            "overflow_scale": step.overflow_scale,
            "finite_scale": step.finite_scale,
            "overflow_probed": step.overflow_probed,
        }

    @classmethod
    def from_rows(cls, parts: list, layer_names) -> dict:
        """Probed when every step was."""
        return {
            "overflow_scale": [p["overflow_scale"] for p in parts],
            "finite_scale": [p["finite_scale"] for p in parts],
            "overflow_probed": all(p["overflow_probed"] for p in parts),
        }
