"""float16 fates at many power-of-two loss scales from one pass over the data.

Multiplying by ``2**k`` only moves a value's binade, so each value's fate at every ``k`` follows
from its binade and a four-way class of its mantissa: one pass histograms the data by (binade,
class) and every scale's counts follow from the histogram. The counts equal
:func:`sim.casting.counts.classify`'s at each scale exactly.

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

from sim.casting.counts import Fp16Counts, _float_values
from updater.common.float16 import FP16_FLUSH_BINADE

# Fates of a scaled binade B (value in [2**B, 2**(B+1))), by mantissa class (see _Format):
# FP16_FLUSH_BINADE (-25): class 0 (exact power of two) flushes, classes 1-3 become 2**-24
_NORMAL_BINADE = -15  # classes 2-3 (fraction >= 1 - 2**-10) round up to 2**-14, a normal
_OVERFLOW_BINADE = 15  # class 3 (fraction >= 1 - 2**-11) rounds up to 65536, i.e. inf

_CHUNK = 1 << 14  # elements per block in sweep (keeps temporaries in cache)
_EXP_LOW, _EXP_HIGH = -1074, 1023  # k with 2.0**k finite and > 0


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
