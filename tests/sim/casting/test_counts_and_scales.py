"""Tests for sim/casting/counts.py: exact float16 counts against NumPy's cast and an exact rational
model."""

import doctest
import importlib.util
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

import sim.casting.counts as fp16
import sim.casting.scales as fp16_sweep
from sim.casting.counts import (
    FP16_MAX,
    FP16_SMALLEST_NORMAL,
    Fp16Counts,
    classify,
    representable_window,
)
from sim.casting.scales import sweep
from tests.paths import ROOT
from updater.common.float16 import FP16_SMALLEST_SUBNORMAL

FIELDS = ("total", "zeros_in", "nonfinite_in", "flushed", "subnormal", "normal", "overflow")
# Rounding boundaries of float16 (and 65504, 2**-24, 2**-14 themselves).
EDGES = (2.0**-25, 2.0**-24, 2.0**-14 - 2.0**-25, 2.0**-14, 65504.0, 65520.0)


def neighbours(dtype, values, steps=2):
    """Each value and its ``steps`` nearest neighbours either way in ``dtype``."""
    out = []
    for v in values:
        up = down = dtype(v)
        out.append(up)
        for _ in range(steps):
            up = np.nextafter(up, dtype(np.inf))
            down = np.nextafter(down, dtype(0))
            out += [up, down]
    return np.array(out, dtype=dtype)


EDGES32 = neighbours(np.float32, EDGES).tolist()
EDGES64 = neighbours(np.float64, EDGES).tolist()


def cast_counts(values, scale):
    """Reference: the plain float16 cast of the float64 product (exact for powers of two)."""
    a = np.abs(np.asarray(values, dtype=np.float64)).ravel()
    finite = np.isfinite(a)
    nonzero = a[finite & (a != 0)]
    with np.errstate(over="ignore", under="ignore"):
        h = np.abs((nonzero * scale).astype(np.float16))
    return {
        "total": a.size,
        "zeros_in": int(np.count_nonzero(finite & (a == 0))),
        "nonfinite_in": int(np.count_nonzero(~finite)),
        "flushed": int(np.count_nonzero(h == 0)),
        "subnormal": int(np.count_nonzero((h > 0) & (h < np.float16(2.0**-14)))),
        "normal": int(np.count_nonzero((h >= np.float16(2.0**-14)) & np.isfinite(h))),
        "overflow": int(np.count_nonzero(np.isinf(h))),
    }


def as_dict(counts):
    return {f: getattr(counts, f) for f in FIELDS}


def exact_round(g: float, scale: float):
    """Independent model: round the exact rational |g*scale| to float16, ties to even.

    Returns ``(fate, rounded magnitude as a Fraction, or None for overflow)``.
    """
    t = abs(Fraction(g) * Fraction(scale))
    if t == 0:
        return "zero", t
    if t >= 65520:
        return "overflow", None
    e = t.numerator.bit_length() - t.denominator.bit_length()
    if t < Fraction(2) ** e:
        e -= 1  # now 2**e <= t < 2**(e+1)
    ulp = Fraction(2) ** (max(e, -14) - 10)
    rounded = round(t / ulp) * ulp  # round() on a Fraction rounds half to even
    if rounded == 0:
        return "flushed", rounded
    return ("subnormal" if rounded < Fraction(2) ** -14 else "normal"), rounded


def exact_counts(values, scale):
    fates = [exact_round(v, scale)[0] for v in np.asarray(values, dtype=np.float64).ravel()]
    return {f: fates.count(f) for f in ("flushed", "subnormal", "normal", "overflow")}


# ---------------------------------------------------------------- pinned facts at the edges


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [-20, -7, 0, 1, 10, 17])
def test_fates_at_the_rounding_boundaries_for_each_scale(dtype, k):
    s = 2.0**k
    up = lambda v: np.nextafter(dtype(v / s), dtype(np.inf))  # noqa: E731
    down = lambda v: np.nextafter(dtype(v / s), dtype(0))  # noqa: E731
    cases = {
        "flushed": [dtype(2.0**-25 / s), down(2.0**-25), dtype(2.0**-26 / s)],
        "subnormal": [
            up(2.0**-25),
            dtype(2.0**-25 / s * (1 + 2.0**-20)),
            dtype(2.0**-24 / s),
            down(2.0**-14 - 2.0**-25),
        ],
        "normal": [
            dtype((2.0**-14 - 2.0**-25) / s),
            dtype(2.0**-14 / s),
            dtype(65504.0 / s),
            dtype(65519.0 / s),
            down(65520.0),
        ],
        "overflow": [dtype(65520.0 / s), up(65520.0), dtype(2.0**16 / s)],
    }
    for fate, values in cases.items():
        x = np.array(values, dtype=dtype)
        by_cast = cast_counts(x, s)
        assert by_cast[fate] == x.size, (fate, x, by_cast)  # what float16 itself does
        assert as_dict(classify(x, s)) == by_cast
        assert as_dict(sweep(x, [k]).counts(k)) == by_cast
        assert exact_counts(x, s)[fate] == x.size


@pytest.mark.parametrize("k", [-12, 0, 9])
def test_float64_bits_below_float32_precision_decide_the_rounding(k):
    s = 2.0**k
    at_scale_1 = [
        2.0**-25 * (1 + 2.0**-40),  # subnormal (float32 would make it 2**-25: flushed)
        65520.0 * (1 - 2.0**-40),  # normal (float32 would make it 65520: overflow)
        (2.0**-14 - 2.0**-25) * (1 - 2.0**-40),  # subnormal (float32: normal)
    ]
    x = np.array(at_scale_1) / s
    assert np.float32(x[0] * s) == 2.0**-25  # the float32 detour really would round
    expected = {"flushed": 0, "subnormal": 2, "normal": 1, "overflow": 0}
    got = classify(x, s)
    assert {f: getattr(got, f) for f in expected} == expected
    assert as_dict(sweep(x, [k - 1, k, k + 1]).counts(k)) == as_dict(got)
    assert as_dict(got) == cast_counts(x, s)


def test_subnormal_inputs_reach_float16_only_at_huge_scales():
    x32 = np.array([2.0**-149, 3 * 2.0**-140, 2.0**-127], dtype=np.float32)
    x64 = np.array([5e-324, 2.0**-1048, 2.0**-1048 * (1 + 2.0**-20), 2.0**-1023])
    for x, ks in ((x32, [0, 100, 124, 125, 130, 140, 150]), (x64, [0, 1000, 1022, 1023])):
        r = sweep(x, ks)
        for k in ks:
            assert as_dict(r.counts(k)) == as_dict(classify(x, 2.0**k)) == cast_counts(x, 2.0**k)
    # 2**-149 * 2**124 = 2**-25 flushes (a tie); 2**-149 * 2**125 = 2**-24 survives
    assert sweep(x32, [124, 125]).flushed.tolist() == [1, 0]
    # at 2**1023: 2**-1048 -> 2**-25 flushes, a hair above it becomes 2**-24
    assert sweep(x64, [1023]).counts(1023).flushed == 2


def test_relative_error_of_known_roundings():
    assert classify([1.0], 1.0).rel_err_max == 0.0
    tie = 1 + 2.0**-11  # halfway between 1 and 1 + 2**-10: rounds to even, 1
    c = classify([tie], 1.0)
    assert c.rel_err_max == c.rel_err_mean == pytest.approx(2.0**-11 / tie, rel=1e-15)
    # 3 * 2**-26 sits between subnormals 2**-24 and 2**-23: rounds to 2**-24 (even)
    c = classify([3 * 2.0**-26 / 8], 8.0)
    assert c.subnormal == 1 and c.rel_err_max == pytest.approx(1 / 3, rel=1e-15)
    c = classify([1.0, 1e-9, 1e6], 1.0)  # survivors only: 1e-9 flushes, 1e6 overflows
    assert (c.flushed, c.overflow, c.rel_err_max) == (1, 1, 0.0)
    assert classify([], 1.0).rel_err_mean == 0.0


def test_representable_window_bounds_the_survivors():
    for s in (1.0, 2.0**-5, 2.0**12, 3.0):
        lo, hi = representable_window(s)
        assert (lo, hi) == (FP16_SMALLEST_SUBNORMAL / s, FP16_MAX / s)
        c = classify([lo, hi, lo / 2, hi * 1.001], s)
        assert (c.subnormal, c.normal, c.flushed, c.overflow) == (1, 1, 1, 1)
    assert (FP16_SMALLEST_SUBNORMAL, FP16_SMALLEST_NORMAL, FP16_MAX) == (
        2.0**-24,
        2.0**-14,
        65504.0,
    )


def test_counts_add_up_and_shares():
    x = np.array([[0.0, -0.0, np.nan], [-np.inf, 1e-9, -3e-6], [1.0, 7e4, -(2.0**-30)]])
    c = classify(x, 1.0)
    assert (c.total, c.zeros_in, c.nonfinite_in, c.nonzero_in) == (9, 2, 2, 5)
    assert (c.flushed, c.subnormal, c.normal, c.overflow) == (2, 1, 1, 1)
    assert c.share_flushed == 0.4 and c.share_overflow == 0.2
    shares = c.share_flushed + c.share_subnormal + c.share_normal + c.share_overflow
    assert shares == pytest.approx(1.0)
    empty = classify(np.zeros(3), 2.0)
    assert empty.nonzero_in == 0 and empty.share_flushed == 0.0
    r = sweep(x, range(-3, 3))
    assert np.array_equal(r.scales, 2.0 ** np.arange(-3, 3))
    assert np.allclose(r.share_flushed + r.share_subnormal + r.share_normal + r.share_overflow, 1)
    assert np.isnan(r.counts(0).rel_err_mean) and np.isnan(r.counts(0).rel_err_max)
    assert sweep(np.zeros(2), [0]).share_normal.tolist() == [0.0]


def test_input_dtypes_and_shapes():
    x16 = np.array([1e-7, 0.5, 6e4], dtype=np.float16)
    assert as_dict(classify(x16, 2.0)) == cast_counts(x16, 2.0)
    assert as_dict(sweep(x16, [1]).counts(1)) == cast_counts(x16, 2.0)
    ints = np.array([[0, 1], [70000, -3]])
    assert as_dict(classify(ints, 1.0)) == cast_counts(ints, 1.0)
    assert as_dict(sweep(ints, [0]).counts(0)) == cast_counts(ints, 1.0)
    assert sweep([1.0], []).flushed.shape == (0,)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]  # not contiguous
    assert as_dict(sweep(x, [0]).counts(0)) == cast_counts(x, 1.0)


def test_sweep_spans_many_blocks():
    rng = np.random.default_rng(5)
    n = 3 * fp16_sweep._CHUNK + 17
    x = rng.lognormal(-9, 4, n) * rng.choice([-1, 1], n)
    x = x.astype(np.float32)
    x[::1000] = 0
    x[5] = np.nan
    ks = range(-24, 40, 7)
    r = sweep(x, ks)
    for k in ks:
        assert as_dict(r.counts(k)) == cast_counts(x, 2.0**k)


# ---------------------------------------------------------------- non-power-of-two scales


def tie_cases(n_wanted=6, seed=0):
    """float32 values x and scales s with fl64(x*s) on a float16 tie but x*s off it."""
    rng = np.random.default_rng(seed)
    found = {1: [], -1: []}
    for _ in range(20000):
        m = float(rng.choice([2.0**-25, 65520.0, 2.0**-14 - 2.0**-25, 1 + 2.0**-11]))
        x = np.float32(m * rng.uniform(0.3, 0.9))
        s = m / float(x)
        if s == 2.0 ** round(math.log2(s)) or float(x) * s != m:
            continue
        diff = Fraction(float(x)) * Fraction(s) - Fraction(m)
        if diff != 0 and len(found[np.sign(diff)]) < n_wanted:
            found[np.sign(diff)].append((x, s))
        if all(len(v) == n_wanted for v in found.values()):
            break
    return found[1] + found[-1]


def test_non_power_of_two_scales_round_the_exact_product_once():
    cases = tie_cases()
    assert len(cases) == 12
    naive_wrong = 0
    for x, s in cases:
        got = classify(np.array([x]), s)
        want = exact_counts([x], s)
        assert {f: getattr(got, f) for f in want} == want
        _, rounded = exact_round(float(x), s)
        if rounded:  # the surviving value itself is the exactly rounded one
            rel = abs(rounded / Fraction(s) - Fraction(float(x))) / Fraction(float(x))
            assert got.rel_err_max == pytest.approx(float(rel), rel=1e-9, abs=1e-300)
        naive_wrong += cast_counts([x], s) != as_dict(got)
    assert naive_wrong > 0  # float64 product then cast would have rounded twice


@given(
    x=arrays(np.float64, array_shapes(max_dims=1, max_side=20), elements=st.floats(-1e6, 1e6)),
    s=st.floats(2.0**-40, 2.0**40),
)
@example(x=np.array([2.0**-25 / 3, 65520.0 / 3]), s=3.0)
def test_classify_any_scale_matches_exact_rational_rounding(x, s):
    got = classify(x, s)
    want = exact_counts(x, s)
    assert {f: getattr(got, f) for f in want} == want


# ---------------------------------------------------------------- Hypothesis: against the cast

scaled_edges32 = st.builds(
    lambda e, j, neg: (-1) ** neg * e * 2.0**j,
    st.sampled_from(EDGES32),
    st.integers(-40, 40),
    st.booleans(),
)
elements32 = st.floats(width=32) | scaled_edges32
scaled_edges64 = st.builds(
    lambda e, j, neg: (-1) ** neg * e * 2.0**j,
    st.sampled_from(EDGES64 + [2.0**-25 * (1 + 2.0**-40), 65520 * (1 - 2.0**-40)]),
    st.integers(-40, 40),
    st.booleans(),
)
elements64 = st.floats() | scaled_edges64
shapes = array_shapes(min_dims=1, max_dims=2, max_side=12)
EDGE_ARRAY32 = np.array(EDGES32, dtype=np.float32)
EDGE_ARRAY64 = np.array(EDGES64, dtype=np.float64)


@given(x=arrays(np.float32, shapes, elements=elements32), k=st.integers(-60, 60))
@example(x=EDGE_ARRAY32, k=0)
@example(x=EDGE_ARRAY32 / 2.0**10, k=10)
@example(x=EDGE_ARRAY32 * 2.0**20, k=-20)
@example(x=np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3e38]), k=0)
def test_classify_float32_matches_the_cast(x, k):
    s = 2.0**k
    got = as_dict(classify(x, s))
    assert got == cast_counts(x, s)
    if -126 <= k <= 127:  # NumPy's float32 product gives the same float16 values here
        with np.errstate(over="ignore", under="ignore"):
            in_float32 = (x * np.float32(s)).astype(np.float16)
            in_float64 = (x.astype(np.float64) * s).astype(np.float16)
        assert np.array_equal(in_float32, in_float64, equal_nan=True)


@given(x=arrays(np.float64, shapes, elements=elements64), k=st.integers(-60, 60))
@example(x=EDGE_ARRAY64, k=0)
@example(x=EDGE_ARRAY64 * 2.0**-33, k=33)
@example(x=np.array([5e-324, -1e308, np.nan, 0.0, 2.0**-25 * (1 + 2.0**-52)]), k=0)
def test_classify_float64_matches_the_cast(x, k):
    assert as_dict(classify(x, 2.0**k)) == cast_counts(x, 2.0**k)


exponent_lists = st.lists(st.integers(-50, 50), min_size=1, max_size=16)


@given(x=arrays(np.float32, shapes, elements=elements32), ks=exponent_lists)
@example(x=EDGE_ARRAY32, ks=[0, 1, -1, 25, -16])
@example(x=EDGE_ARRAY32 * 2.0**-7, ks=[7, 6, 8])
def test_sweep_float32_equals_classify_per_scale(x, ks):
    r = sweep(x, ks)
    assert r.exponents.tolist() == ks
    for k in ks:
        assert as_dict(r.counts(k)) == as_dict(classify(x, 2.0**k))


@given(x=arrays(np.float64, shapes, elements=elements64), ks=exponent_lists)
@example(x=EDGE_ARRAY64, ks=[0, 1, -1, 25, -16])
@example(x=EDGE_ARRAY64 * 2.0**13, ks=[-13, -14, -12])
def test_sweep_float64_equals_classify_per_scale(x, ks):
    r = sweep(x, ks)
    for i, k in enumerate(ks):
        c = classify(x, 2.0**k)
        assert as_dict(r.counts(k)) == as_dict(c)
        assert (r.flushed[i], r.subnormal[i], r.normal[i], r.overflow[i]) == (
            c.flushed,
            c.subnormal,
            c.normal,
            c.overflow,
        )


def test_counts_of_an_exponent_not_swept():
    r = sweep([1.0], [0, 3])
    with pytest.raises(ValueError, match="k must be one of the swept exponents") as info:
        r.counts(4)
    assert "[0, 3], got 4" in str(info.value)
    with pytest.raises(TypeError, match="k must be an int"):
        r.counts(3.0)
    assert isinstance(r.counts(np.int64(3)), Fp16Counts)


def test_docstring_examples_run():
    result = doctest.testmod(fp16)
    assert result.attempted >= 5 and result.failed == 0


def test_benchmark_counts_agree_with_casting_each_scale():
    path = ROOT / "benchmarks" / "bench_fp16.py"
    spec = importlib.util.spec_from_file_location("bench_fp16", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.run(n=5000, n_scales=40, repeats=1)
    assert result["counts_match"] is True
    assert result["exponents"] == (-16, 23) and result["sweep_s"] > 0
    table = bench.markdown(result)
    assert "| `sweep` (one pass, all scales) |" in table and "identical counts: True" in table
    with pytest.raises(ValueError, match="n_scales must be an int in \\[1, 127\\], got 0"):
        bench.run(n=10, n_scales=0)
