"""Exact float16 facts: what a cast to float16 does to gradient values at a given loss scale.

Every value ``g`` is scaled by the loss scale ``s`` and rounded once to float16 (round to nearest,
ties to even), exactly as ``np.float16`` does. Its fate is one of:

* **flushed**: ``|g*s| <= 2**-25`` becomes 0 (``2**-25`` itself is a tie and rounds to even, 0);
* **subnormal**: ``2**-25 < |g*s| < 2**-14 - 2**-25`` becomes a nonzero multiple of ``2**-24``
  below ``2**-14`` (the tie at ``2**-14 - 2**-25`` rounds up to ``2**-14``, a normal);
* **normal**: ``2**-14 - 2**-25 <= |g*s| < 65520`` becomes a normal float16 up to 65504;
* **overflow**: ``|g*s| >= 65520`` becomes inf (65520 is a tie and rounds to even, inf).

Exact zeros and non-finite inputs are counted apart. :func:`classify` casts at one scale;
:func:`sim.casting.scales.sweep` gives the same counts for many power-of-two scales from one pass
over the data.

>>> c = classify([0.0, 2.0**-26, 3e-8, 1e-3, 7e4], scale=1.0)
>>> c.zeros_in, c.flushed, c.subnormal, c.normal, c.overflow
(1, 1, 1, 1, 1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Tuple

import numpy as np

from updater.common.float16 import (
    FP16_FLUSH_EDGE,
    FP16_MAX,
    FP16_OVERFLOW,
    FP16_SMALLEST_NORMAL,
    FP16_SMALLEST_SUBNORMAL,
)
from updater.common.validation import check_positive


@dataclass(frozen=True)
class Fp16Counts:
    """What a float16 cast does to a set of values at one scale.

    Attributes:
        total (int): number of input values.
        zeros_in (int): exact zeros in the input.
        nonfinite_in (int): NaN or inf in the input.
        flushed (int): nonzero finite inputs that become 0.
        subnormal (int): nonzero finite inputs that become nonzero float16 subnormals.
        normal (int): nonzero finite inputs that become normal float16 values.
        overflow (int): finite inputs that become +-inf.
        rel_err_mean (float): mean of ``|fp16(g*s)/s - g| / |g|`` over the survivors (nonzero
            finite inputs that stay nonzero and finite), computed in float64; 0.0 if there are
            none; NaN when not computed (counts from :func:`sim.casting.scales.sweep`).
        rel_err_max (float): largest such relative error; same conventions.
    """

    total: int
    zeros_in: int
    nonfinite_in: int
    flushed: int
    subnormal: int
    normal: int
    overflow: int
    rel_err_mean: float
    rel_err_max: float

    @property
    def nonzero_in(self) -> int:
        """Nonzero finite inputs (= flushed + subnormal + normal + overflow)."""
        return self.total - self.zeros_in - self.nonfinite_in

    def _share(self, count: int) -> float:
        return count / self.nonzero_in if self.nonzero_in else 0.0

    @property
    def share_flushed(self) -> float:
        """Flushed / nonzero finite inputs (0.0 if there are none)."""
        return self._share(self.flushed)

    @property
    def share_subnormal(self) -> float:
        """Subnormal / nonzero finite inputs (0.0 if there are none)."""
        return self._share(self.subnormal)

    @property
    def share_normal(self) -> float:
        """Normal / nonzero finite inputs (0.0 if there are none)."""
        return self._share(self.normal)

    @property
    def share_overflow(self) -> float:
        """Overflow / nonzero finite inputs (0.0 if there are none)."""
        return self._share(self.overflow)


# ---------------------------------------------------------------- input checks


def _float_values(values) -> np.ndarray:
    """Return the values as a contiguous 1-D float32 or float64 array, without rounding."""
    x = np.asarray(values)
    kind, size = x.dtype.kind, x.dtype.itemsize
    if kind == "f" and size <= 4:
        x = x.astype(np.float32, copy=False)  # float16 widens exactly
    elif kind in "iub":
        x = x.astype(np.float64)
    elif not (kind == "f" and size == 8):
        raise TypeError(
            f"values must be an array of float16, float32 or float64 (or ints), got dtype "
            f"{x.dtype}; convert with np.asarray(values, dtype=np.float64) if that is exact"
        )
    return np.ascontiguousarray(x).ravel()


# ---------------------------------------------------------------- one scale, by casting


def _is_power_of_two(s: float) -> bool:
    return math.frexp(s)[0] == 0.5


def _fp16_spacing(p: np.ndarray) -> np.ndarray:
    """Distance between neighbouring float16 values around magnitudes ``p`` (> 0, finite)."""
    _, e = np.frexp(p)  # p in [2**(e-1), 2**e)
    return np.maximum(np.ldexp(1.0, e - 11), FP16_SMALLEST_SUBNORMAL)


def _product_error_sign(a: np.ndarray, s: float) -> np.ndarray:
    """Sign of ``a*s - fl(a*s)`` (exact minus float64 product), for a > 0 finite and products
    in float64's normal range (the only ones this is used for).

    Dekker's two-product on the frexp mantissas (in [0.5, 1)), so the splitting cannot
    overflow; in the normal range a power-of-two factor does not change how a product rounds.
    """
    ma, _ = np.frexp(a)
    ms, _ = math.frexp(s)
    split = 2.0**27 + 1.0
    t = ma * split
    ah = t - (t - ma)
    al = ma - ah
    t = ms * split
    sh = t - (t - ms)
    sl = ms - sh
    p = ma * ms
    err = ((ah * sh - p) + ah * sl + al * sh) + al * sl
    return np.sign(err)


def _cast_scaled(a: np.ndarray, s: float) -> np.ndarray:
    """float16 of the exact products ``a*s`` (a >= 0 finite float64), rounded once.

    A power-of-two ``s`` makes ``a*s`` exact in float64 (or out of float16's reach when it
    under/overflows float64). Otherwise ``fl(a*s)`` can land exactly on a float16 rounding tie
    that the exact product misses; those few values are re-rounded by the sign of the product's
    rounding error. Everywhere else ``fl(a*s)`` and ``a*s`` round to the same float16.
    """
    with np.errstate(over="ignore", under="ignore"):
        p = a * s
        h = p.astype(np.float16)
    if _is_power_of_two(s):
        return h
    near = np.flatnonzero((p >= FP16_FLUSH_EDGE) & (p <= FP16_OVERFLOW))
    if near.size == 0:
        return h
    spacing = _fp16_spacing(p[near])
    on_tie = (p[near] / spacing) % 1.0 == 0.5
    near, spacing = near[on_tie], spacing[on_tie]
    if near.size:
        sign = _product_error_sign(a[near], s)
        moved = sign != 0
        fixed = p[near[moved]] + sign[moved] * spacing[moved] / 2  # the neighbour on that side
        with np.errstate(over="ignore"):
            h[near[moved]] = fixed.astype(np.float16)
    return h


def classify(values, scale=1.0) -> Fp16Counts:
    """Count what ``float16(values * scale)`` gives, exactly, with relative errors.

    The product is rounded only once, by the float16 cast: it is formed in float64, which is
    exact for power-of-two scales; for other scales the rare products that float64 rounds onto
    a float16 rounding tie are re-rounded from the exact product. (Note: ``x * scale`` with a
    float32 ``x`` computes in float32 in NumPy, a first rounding this function avoids.)

    Args:
        values (array-like of float16/float32/float64 or ints): any shape; ints are taken as
            float64.
        scale (float, default 1.0): loss scale, finite and > 0.

    Returns:
        Fp16Counts: counts, and the mean and largest relative error of the survivors.

    Raises:
        TypeError: ``scale`` is not a real number, or ``values`` has another dtype.
        ValueError: ``scale`` is not finite and > 0.

    >>> c = classify(np.float32([2.0**-25, 2.0**-24, 1.0, 65520.0, np.nan]))
    >>> c.flushed, c.subnormal, c.normal, c.overflow, c.nonfinite_in
    (1, 1, 1, 1, 1)
    >>> classify([1e-6], scale=2.0**10).rel_err_max < 2.0**-11
    True
    """
    s = check_positive("scale", scale, hint="; e.g. scale=2.0**10")
    x = _float_values(values)
    total = int(x.size)
    a = np.abs(x.astype(np.float64))
    finite = np.isfinite(a)
    nonfinite = total - int(np.count_nonzero(finite))
    a = a[finite & (a != 0)]
    zeros = total - nonfinite - int(a.size)
    h = _cast_scaled(a, s).astype(np.float64)
    flushed = int(np.count_nonzero(h == 0))
    overflow = int(np.count_nonzero(np.isinf(h)))
    normal = int(np.count_nonzero(h >= FP16_SMALLEST_NORMAL)) - overflow
    subnormal = int(a.size) - flushed - overflow - normal
    kept = (h != 0) & ~np.isinf(h)
    if kept.any():
        g = a[kept]
        rel = np.abs(h[kept] / s - g) / g
        rel_mean, rel_max = float(rel.mean()), float(rel.max())
    else:
        rel_mean = rel_max = 0.0
    return Fp16Counts(
        total=total,
        zeros_in=zeros,
        nonfinite_in=nonfinite,
        flushed=flushed,
        subnormal=subnormal,
        normal=normal,
        overflow=overflow,
        rel_err_mean=rel_mean,
        rel_err_max=rel_max,
    )


def representable_window(scale) -> Tuple[float, float]:
    """Unscaled magnitudes that survive as nonzero finite float16 at ``scale`` (for plots).

    Args:
        scale (float): loss scale, finite and > 0.

    Returns:
        ``(lo, hi) = (2**-24 / scale, 65504 / scale)``.

    >>> representable_window(2.0**10)
    (5.820766091346741e-11, 63.96875)
    """
    s = check_positive("scale", scale, hint="; e.g. scale=2.0**10")
    return FP16_SMALLEST_SUBNORMAL / s, FP16_MAX / s
