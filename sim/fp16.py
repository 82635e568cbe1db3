"""Exact float16 facts: what a cast to float16 does to gradient values at a given loss scale.

Every value ``g`` is scaled by the loss scale ``s`` and rounded once to float16 (round to nearest,
ties to even), exactly as ``np.float16`` does. Its fate is one of:

* **flushed**: ``|g*s| <= 2**-25`` becomes 0 (``2**-25`` itself is a tie and rounds to even, 0);
* **subnormal**: ``2**-25 < |g*s| < 2**-14 - 2**-25`` becomes a nonzero multiple of ``2**-24``
  below ``2**-14`` (the tie at ``2**-14 - 2**-25`` rounds up to ``2**-14``, a normal);
* **normal**: ``2**-14 - 2**-25 <= |g*s| < 65520`` becomes a normal float16 up to 65504;
* **overflow**: ``|g*s| >= 65520`` becomes inf (65520 is a tie and rounds to even, inf).

Exact zeros and non-finite inputs are counted apart. :func:`classify` casts at one scale;
:func:`sweep` gives the same counts for many power-of-two scales from one pass over the data,
using the fact that multiplying by ``2**k`` only moves a value's binade, so each value's fate at
every ``k`` follows from its binade and a four-way class of its mantissa (see :func:`sweep`).

>>> c = classify([0.0, 2.0**-26, 3e-8, 1e-3, 7e4], scale=1.0)
>>> c.zeros_in, c.flushed, c.subnormal, c.normal, c.overflow
(1, 1, 1, 1, 1)
>>> r = sweep([2.0**-26, 1e-3], exponents=[0, 1, 2])
>>> r.flushed.tolist(), r.subnormal.tolist()
([1, 1, 0], [0, 0, 1])
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import NamedTuple, Tuple

import numpy as np

from updater.checks import check_positive
from updater.float16 import (
    FP16_FLUSH_BINADE,
    FP16_FLUSH_EDGE,
    FP16_MAX,
    FP16_OVERFLOW,
    FP16_SMALLEST_NORMAL,
    FP16_SMALLEST_SUBNORMAL,
)

# Fates of a scaled binade B (value in [2**B, 2**(B+1))), by mantissa class (see _Format):
# FP16FP16_FLUSH_BINADE: class 0 (exact power of two) flushes, classes 1-3 become 2**-24
_NORMAL_BINADE = -15  # classes 2-3 (fraction >= 1 - 2**-10) round up to 2**-14, a normal
_OVERFLOW_BINADE = 15  # class 3 (fraction >= 1 - 2**-11) rounds up to 65536, i.e. inf

_CHUNK = 1 << 14  # elements per block in sweep (keeps temporaries in cache)
_EXP_LOW, _EXP_HIGH = -1074, 1023  # k with 2.0**k finite and > 0


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
            none; NaN when not computed (counts from :func:`sweep`).
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


def _check_exponents(exponents) -> np.ndarray:
    k = np.asarray(exponents)
    if k.shape == (0,):
        return np.zeros(0, dtype=np.int64)
    if k.dtype.kind not in "iu":
        raise TypeError(
            f"exponents must be a 1-D sequence of ints in [{_EXP_LOW}, {_EXP_HIGH}], got "
            f"{exponents!r} (dtype {k.dtype}); e.g. exponents=range(-10, 30)"
        )
    if k.ndim != 1:
        raise ValueError(f"exponents must be 1-D, got shape {k.shape}: {exponents!r}")
    bad = (k < _EXP_LOW) | (k > _EXP_HIGH)
    if bad.any():
        raise ValueError(
            f"exponents must be ints in [{_EXP_LOW}, {_EXP_HIGH}] (2.0**k finite and > 0), "
            f"got {k[bad][0]!r} in {exponents!r}"
        )
    return k.astype(np.int64)


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


# ---------------------------------------------------------------- many scales, one pass


class _Format(NamedTuple):
    """Bit layout of a binary float format, for the mantissa classes used by :func:`sweep`."""

    uint: type
    mant_bits: int
    exp_max: int  # biased exponent of inf/NaN
    bias: int
    sub_shift: int  # subnormals times 2**sub_shift are normal, exactly

    @property
    def abs_mask(self):
        return self.uint((1 << (8 * np.dtype(self.uint).itemsize - 1)) - 1)

    @property
    def mant_mask(self):
        return self.uint((1 << self.mant_bits) - 1)

    @property
    def top10(self):  # fraction >= 1 - 2**-10: top 10 mantissa bits set
        return self.uint(((1 << 10) - 1) << (self.mant_bits - 10))

    @property
    def top11(self):  # fraction >= 1 - 2**-11: top 11 mantissa bits set
        return self.uint(((1 << 11) - 1) << (self.mant_bits - 11))


_FORMATS = {
    np.dtype(np.float32): _Format(np.uint32, 23, 255, 127, 64),
    np.dtype(np.float64): _Format(np.uint64, 52, 2047, 1023, 128),
}


def _chunk_histogram(x: np.ndarray, fmt: _Format) -> np.ndarray:
    """Counts by (biased exponent, mantissa class) of one block, shape ``(exp_max + 1, 4)``.

    Class 0: mantissa field 0; 1: below ``top10``; 2: in [top10, top11); 3: >= top11.
    """
    bits = x.view(fmt.uint) & fmt.abs_mask
    mant = bits & fmt.mant_mask
    key = bits >> fmt.mant_bits
    key <<= 2
    key += mant != 0
    key += mant >= fmt.top10
    key += mant >= fmt.top11
    if fmt.uint is np.uint64:
        key = key.view(np.int64)
    return np.bincount(key, minlength=4 * (fmt.exp_max + 1)).reshape(fmt.exp_max + 1, 4)


def _class_histogram(x: np.ndarray) -> Tuple[np.ndarray, int, int, int]:
    """One pass over ``x``: counts of nonzero finite values by (binade, class), zeros, non-finite.

    Returns ``(hist, offset, zeros, nonfinite)`` where ``hist[i, c]`` counts values of binade
    ``i - offset`` (value in ``[2**(i-offset), 2**(i-offset+1))``) and mantissa class ``c``.
    """
    fmt = _FORMATS[x.dtype]
    hist = np.zeros((fmt.exp_max + fmt.sub_shift, 4), dtype=np.int64)
    zeros = nonfinite = 0
    tiny = x.dtype.type(2.0 ** (1 - fmt.bias))
    lift = x.dtype.type(2.0**fmt.sub_shift)
    for start in range(0, x.size, _CHUNK):
        block = x[start : start + _CHUNK]
        h = _chunk_histogram(block, fmt)
        zeros += int(h[0, 0])
        nonfinite += int(h[fmt.exp_max].sum())
        hist[fmt.sub_shift + 1 :] += h[1 : fmt.exp_max]
        if h[0, 1:].any():  # subnormal inputs: lift them into the normal range, exactly
            a = np.abs(block)
            lifted = a[(a < tiny) & (a != 0)] * lift
            hist[: fmt.exp_max + 1] += _chunk_histogram(lifted, fmt)
    return hist, fmt.bias + fmt.sub_shift, zeros, nonfinite


def _fates(hist: np.ndarray, offset: int, k: np.ndarray):
    """Counts flushed/subnormal/normal/overflow at scales ``2**k`` from a class histogram."""
    per_binade = hist.sum(axis=1)
    cum = np.concatenate([[0], np.cumsum(per_binade)])
    n = per_binade.size

    def binades(lo, hi):  # all values whose scaled binade B is in [lo, hi]
        i0 = np.clip(lo - k + offset, 0, n)
        i1 = np.clip(hi - k + offset + 1, 0, n)
        return np.where(i1 > i0, cum[i1] - cum[np.minimum(i0, i1)], 0)

    def classes(b, cls):  # values of scaled binade b in mantissa classes cls
        i = b - k + offset
        inside = (i >= 0) & (i < n)
        return np.where(inside, hist[np.clip(i, 0, n - 1)][:, cls].sum(axis=1), 0)

    low, high = np.iinfo(np.int64).min // 2, np.iinfo(np.int64).max // 2
    flushed = binades(low, FP16_FLUSH_BINADE - 1) + classes(FP16_FLUSH_BINADE, [0])
    subnormal = (
        classes(FP16_FLUSH_BINADE, [1, 2, 3])
        + binades(FP16_FLUSH_BINADE + 1, _NORMAL_BINADE - 1)
        + classes(_NORMAL_BINADE, [0, 1])
    )
    normal = (
        classes(_NORMAL_BINADE, [2, 3])
        + binades(_NORMAL_BINADE + 1, _OVERFLOW_BINADE - 1)
        + classes(_OVERFLOW_BINADE, [0, 1, 2])
    )
    overflow = classes(_OVERFLOW_BINADE, [3]) + binades(_OVERFLOW_BINADE + 1, high)
    return flushed, subnormal, normal, overflow


@dataclass(frozen=True, eq=False)
class SweepResult:
    """Counts at scales ``2**k`` for each ``k`` in ``exponents`` (from :func:`sweep`).

    Attributes:
        exponents (int64 array): the ``k`` of each entry, in the order given.
        flushed, subnormal, normal, overflow (int64 arrays): counts per exponent, as in
            :class:`Fp16Counts`.
        total (int), zeros_in (int), nonfinite_in (int): as in :class:`Fp16Counts` (the same
            at every scale).

    Relative errors are not computed by a sweep: :meth:`counts` sets them to NaN; call
    :func:`classify` at one scale for them.
    """

    exponents: np.ndarray
    flushed: np.ndarray
    subnormal: np.ndarray
    normal: np.ndarray
    overflow: np.ndarray
    total: int
    zeros_in: int
    nonfinite_in: int

    @property
    def scales(self) -> np.ndarray:
        """The scales ``2.0**exponents`` (float64)."""
        return np.ldexp(1.0, self.exponents)

    @property
    def nonzero_in(self) -> int:
        """Nonzero finite inputs."""
        return self.total - self.zeros_in - self.nonfinite_in

    def _share(self, count: np.ndarray) -> np.ndarray:
        return count / self.nonzero_in if self.nonzero_in else np.zeros(count.shape)

    @property
    def share_flushed(self) -> np.ndarray:
        """Flushed / nonzero finite inputs, per exponent (zeros if there are no such inputs)."""
        return self._share(self.flushed)

    @property
    def share_subnormal(self) -> np.ndarray:
        """Subnormal / nonzero finite inputs, per exponent."""
        return self._share(self.subnormal)

    @property
    def share_normal(self) -> np.ndarray:
        """Normal / nonzero finite inputs, per exponent."""
        return self._share(self.normal)

    @property
    def share_overflow(self) -> np.ndarray:
        """Overflow / nonzero finite inputs, per exponent."""
        return self._share(self.overflow)

    def counts(self, k: int) -> Fp16Counts:
        """The :class:`Fp16Counts` at scale ``2**k`` (``k`` must be one of ``exponents``);
        its relative-error fields are NaN.
        """
        if not isinstance(k, numbers.Integral) or isinstance(k, (bool, np.bool_)):
            raise TypeError(f"k must be an int, one of {self.exponents.tolist()}, got {k!r}")
        where = np.flatnonzero(self.exponents == k)
        if where.size == 0:
            raise ValueError(
                f"k must be one of the swept exponents {self.exponents.tolist()}, got {k!r}"
            )
        i = where[0]
        return Fp16Counts(
            total=self.total,
            zeros_in=self.zeros_in,
            nonfinite_in=self.nonfinite_in,
            flushed=int(self.flushed[i]),
            subnormal=int(self.subnormal[i]),
            normal=int(self.normal[i]),
            overflow=int(self.overflow[i]),
            rel_err_mean=math.nan,
            rel_err_max=math.nan,
        )


def sweep(values, exponents) -> SweepResult:
    """Counts at every scale ``2**k``, ``k`` in ``exponents``, from one pass over ``values``.

    Identical to ``classify(values, 2.0**k)`` for each ``k`` (counts only; relative errors are
    not computed). Multiplying by ``2**k`` is exact and only moves a value's binade, so its fate
    depends on its binade and on which of four classes its mantissa field falls in: zero (the
    tie at ``2**-25`` flushes), below or at least ``1 - 2**-10`` (the round-up from the
    subnormals to ``2**-14``), and at least ``1 - 2**-11`` (the round-up to 65536, i.e. inf).
    One pass over the integer view of the data histograms (binade, class); every scale is then
    a few sums over that histogram. float64 inputs use their own bits (no detour via float32).

    Args:
        values (array-like of float16/float32/float64 or ints): any shape.
        exponents (1-D sequence of ints): each in [-1074, 1023]; repeats allowed.

    Returns:
        SweepResult: one entry per exponent, in the order given.

    Raises:
        TypeError: ``exponents`` are not ints, or ``values`` has an unsupported dtype.
        ValueError: ``exponents`` is not 1-D or an exponent is out of range.

    >>> r = sweep(np.float32([2.0**-25, 65519.0, 65520.0]), range(0, 2))
    >>> r.flushed.tolist(), r.subnormal.tolist(), r.normal.tolist(), r.overflow.tolist()
    ([1, 0], [0, 1], [1, 0], [1, 2])
    """
    k = _check_exponents(exponents)
    x = _float_values(values)
    hist, offset, zeros, nonfinite = _class_histogram(x)
    flushed, subnormal, normal, overflow = _fates(hist, offset, k)
    return SweepResult(
        exponents=k,
        flushed=flushed.astype(np.int64),
        subnormal=subnormal.astype(np.int64),
        normal=normal.astype(np.int64),
        overflow=overflow.astype(np.int64),
        total=int(x.size),
        zeros_in=zeros,
        nonfinite_in=nonfinite,
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
