"""Gradient traces: per-step gradient-magnitude histograms that a policy can be replayed over.

A trace holds, for each training step, a histogram of nonzero finite gradient magnitudes by
binade (bin ``i`` counts values ``v`` with ``floor(log2|v|) == EXP_MIN + i``; values outside the
range land in the end bins), the count of exact zeros, the largest magnitude (unscaled), and
whether the step is non-finite whatever the scale (a bad batch). The updater's gradient recorder
writes the same format, so recorded and synthetic traces replay alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Union

import numpy as np

EXP_MIN = -80
"""Binade of the first histogram bin (values below 2**EXP_MIN are counted there)."""
EXP_MAX = 40
"""Binade of the last histogram bin (values at or above 2**EXP_MAX are counted there)."""
NBINS = EXP_MAX - EXP_MIN + 1
FORMAT_VERSION = 1


def binade_histogram(values) -> tuple:
    """Histogram one step's gradient values by binade.

    Args:
        values (array-like of float): gradient values (any float dtype, any shape).

    Returns:
        ``(counts, zeros, absmax, finite)``: int64 counts of length :data:`NBINS` over nonzero
        finite magnitudes, the number of exact zeros, the largest finite magnitude (0.0 if none)
        and whether every value was finite.

    >>> counts, zeros, absmax, finite = binade_histogram([0.0, 0.75, -3.0, 1e-30])
    >>> int(counts[-1 - EXP_MIN]), int(counts[1 - EXP_MIN]), zeros, absmax, finite
    (1, 1, 1, 3.0, True)
    """
    a = np.abs(np.asarray(values, dtype=np.float64).ravel())
    fin = np.isfinite(a)
    all_finite = bool(fin.all())
    if not all_finite:
        a = a[fin]
    nonzero = a[a > 0]
    _, exp = np.frexp(nonzero)
    binade = np.clip(exp.astype(np.int64) - 1, EXP_MIN, EXP_MAX) - EXP_MIN
    counts = np.bincount(binade, minlength=NBINS).astype(np.int64)
    absmax = float(nonzero.max()) if nonzero.size else 0.0
    return counts, int(a.size - nonzero.size), absmax, all_finite


@dataclass
class Trace:
    """Per-step gradient-magnitude statistics.

    Attributes:
        counts: int64 array ``(steps, NBINS)`` of nonzero finite magnitudes per binade.
        zeros: int64 array ``(steps,)`` of exact zeros per step.
        absmax: float64 array ``(steps,)`` of the largest finite magnitude per step (unscaled).
        nonfinite: bool array ``(steps,)``, True where the step is bad whatever the scale.
        name: a label for plots and tables.
    """

    counts: np.ndarray
    zeros: np.ndarray
    absmax: np.ndarray
    nonfinite: np.ndarray
    name: str = "trace"

    def __post_init__(self):
        self.counts = np.asarray(self.counts, dtype=np.int64)
        self.zeros = np.asarray(self.zeros, dtype=np.int64)
        self.absmax = np.asarray(self.absmax, dtype=np.float64)
        self.nonfinite = np.asarray(self.nonfinite, dtype=bool)
        steps = self.counts.shape[0]
        if self.counts.ndim != 2 or self.counts.shape[1] != NBINS:
            raise ValueError(f"counts must have shape (steps, {NBINS}), got {self.counts.shape}")
        for name in ("zeros", "absmax", "nonfinite"):
            shape = getattr(self, name).shape
            if shape != (steps,):
                raise ValueError(f"{name} must have shape ({steps},), got {shape}")

    @property
    def steps(self) -> int:
        """Number of steps."""
        return int(self.counts.shape[0])

    @classmethod
    def from_steps(cls, step_values, name: str = "trace") -> Trace:
        """Build a trace from an iterable of per-step gradient arrays."""
        rows = [binade_histogram(v) for v in step_values]
        if not rows:
            raise ValueError("step_values must hold at least one step, got none")
        counts, zeros, absmax, finite = zip(*rows)
        return cls(np.stack(counts), zeros, absmax, ~np.asarray(finite), name=name)

    def save(self, path: Union[str, Path]) -> Path:
        """Write the trace to ``path`` (.npz) atomically; return the path."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez_compressed(
            tmp,
            format_version=FORMAT_VERSION,
            exp_min=EXP_MIN,
            exp_max=EXP_MAX,
            counts=self.counts,
            zeros=self.zeros,
            absmax=self.absmax,
            nonfinite=self.nonfinite,
            name=self.name,
        )
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: Union[str, Path]) -> Trace:
        """Read a trace written by :meth:`save` (or by the updater's gradient recorder)."""
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("counts", "zeros", "absmax", "nonfinite") if k not in z]
            if missing:
                raise ValueError(f"{path} is not a gradient trace: missing arrays {missing}")
            if int(z["exp_min"]) != EXP_MIN or int(z["exp_max"]) != EXP_MAX:
                raise ValueError(
                    f"{path} uses binades [{int(z['exp_min'])}, {int(z['exp_max'])}], "
                    f"this version reads [{EXP_MIN}, {EXP_MAX}]"
                )
            name = str(z["name"]) if "name" in z else Path(path).stem
            return cls(z["counts"], z["zeros"], z["absmax"], z["nonfinite"], name=name)
