"""``largest_safe_scale`` clears the mantissa bits of ``65504 / (a * margin)`` instead of the
frexp/ceil/ldexp round trip (issue 42): the same bits, dtypes and types on every value, the
edges included (0, inf, NaN, negatives, subnormals, powers of two and their neighbours)."""

import numpy as np
import pytest

from updater.common.float16 import FP16_MAX
from updater.policy import largest_safe_scale


def frexp_safe_scale(grad_absmax_unscaled, margin=1.0):
    """The round trip the function used before: the reference."""
    a = np.asarray(grad_absmax_unscaled, dtype=np.float64)
    with np.errstate(divide="ignore", over="ignore"):
        y = FP16_MAX / (a * margin)
    m, e = np.frexp(y)
    return np.ldexp(np.ceil(m) * 0.5, e)


def positive_edges() -> np.ndarray:
    """0, inf, every power of two (subnormal to the largest) and both neighbours of each, the
    largest float, the powers of two around ``65504 / 2**k`` and their neighbours."""
    powers = np.ldexp(1.0, np.arange(-1074, 1024))
    near = FP16_MAX / powers[1000:1200]
    values = np.concatenate(
        [
            [0.0, np.inf, np.finfo(np.float64).max, FP16_MAX, 1.0 / 3.0],
            powers,
            np.nextafter(powers, 0.0),
            np.nextafter(powers, np.inf),
            near,
            np.nextafter(near, 0.0),
            np.nextafter(near, np.inf),
            np.random.default_rng(0).lognormal(0.0, 30.0, 2000),
        ]
    )
    return values[values >= 0]  # nextafter(2**-1074, 0) is 0: kept, just once more


def nans() -> np.ndarray:
    payloads = np.array([0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000012345], np.uint64)
    return payloads.view(np.float64)


def assert_same_bits(got, expected):
    assert type(got) is type(expected)
    assert got.dtype == expected.dtype and np.shape(got) == np.shape(expected)
    assert np.asarray(got).tobytes() == np.asarray(expected).tobytes()


@pytest.mark.parametrize("margin", [1.0, 1, 1.5, 3.0, 1e300, np.float32(1.0)])
def test_arrays_of_positive_values_give_the_frexp_bits(margin):
    a = positive_edges()
    assert_same_bits(largest_safe_scale(a, margin), frexp_safe_scale(a, margin))
    grid = a[:1200].reshape(40, 30)[:, ::2]  # a 2-D strided view
    assert_same_bits(largest_safe_scale(grid, margin), frexp_safe_scale(grid, margin))


@pytest.mark.parametrize("margin", [1.0, 2.5])
def test_arrays_with_nan_or_negative_values_give_the_frexp_bits(margin):
    a = positive_edges()
    for extra in (nans(), -a[:500], [-0.0], [-np.inf]):
        mixed = np.concatenate([a[:300], extra, a[300:600]])
        assert_same_bits(largest_safe_scale(mixed, margin), frexp_safe_scale(mixed, margin))


def test_single_numbers_empty_and_broadcast_arrays_keep_their_types():
    values = np.concatenate([positive_edges()[::97], nans(), [-0.0, -np.inf, -3.0]])
    for v in values:
        for x in (float(v), np.float64(v), np.array(v)):
            assert_same_bits(largest_safe_scale(x), frexp_safe_scale(x))
            assert_same_bits(largest_safe_scale(x, 1.5), frexp_safe_scale(x, 1.5))
    empty = np.zeros((0, 3))
    assert_same_bits(largest_safe_scale(empty), frexp_safe_scale(empty))
    column = np.broadcast_to(np.array([[1.0], [3.0e-5]]), (2, 4))
    margins = np.array([1.0, 1.0, 2.0, 3.0])  # array settings, as stacked policies hold
    assert_same_bits(largest_safe_scale(column, margins), frexp_safe_scale(column, margins))
    assert largest_safe_scale(1.0) == 32768.0 and largest_safe_scale([1.0]).tolist() == [32768.0]
