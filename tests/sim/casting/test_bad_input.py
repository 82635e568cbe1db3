"""Bad input to the exact float16 counts and the scale sweep raises TypeError or ValueError
naming the argument."""

import numpy as np
import pytest

from sim.casting.counts import (
    classify,
    representable_window,
)
from sim.casting.scales import sweep

# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("bad", [0, 0.0, -1, -(2.0**10), float("nan"), float("inf"), -np.inf])
def test_bad_scale_raises_value_error_naming_it(bad):
    for call in (lambda: classify([1.0], bad), lambda: representable_window(bad)):
        with pytest.raises(ValueError, match="scale") as info:
            call()
        assert repr(bad) in str(info.value) and "> 0" in str(info.value)


@pytest.mark.parametrize("bad", ["2", None, True, [2.0], 1j])
def test_non_number_scale_raises_type_error(bad):
    with pytest.raises(TypeError, match="scale") as info:
        classify([1.0], bad)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("bad", [[1.5], [0, 2.5], np.array([1.0, 2.0]), ["3"], [True]])
def test_non_integer_exponents_raise_type_error(bad):
    with pytest.raises(TypeError, match="exponents must be") as info:
        sweep([1.0], bad)
    assert "got" in str(info.value) and repr(bad) in str(info.value)


@pytest.mark.parametrize("bad", [[0, 1024], [-1075], [[1, 2]]])
def test_out_of_range_or_2d_exponents_raise_value_error(bad):
    with pytest.raises(ValueError, match="exponents must be") as info:
        sweep([1.0], bad)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("bad", [np.array([1 + 1j]), np.array(["a"]), np.array([1.0], "g")])
def test_unsupported_value_dtypes_raise_type_error(bad):
    if bad.dtype == np.float64:  # platforms where longdouble is float64 accept it exactly
        pytest.skip("longdouble is float64 here")
    for call in (classify, lambda v: sweep(v, [0])):
        with pytest.raises(TypeError, match="values must be") as info:
            call(bad)
        assert str(bad.dtype) in str(info.value)
