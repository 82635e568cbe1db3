"""A start above the bounds says why the bounds are where they are (issue 41): PyTorch's
``init_scale=2**16`` meets the float16 seed's limit, and nnabla's ``scale=65504`` is not called
"above 65504"."""

import pytest

from updater import DynamicScale, HeadroomScale


@pytest.mark.parametrize("cls", [DynamicScale, HeadroomScale])
def test_a_start_above_max_scale_explains_the_float16_seed(cls):
    with pytest.raises(ValueError) as error:
        cls(init_scale=2**16)
    message = str(error.value)
    assert message.startswith("need 0 < min_scale <= init_scale <= max_scale, got min_scale=1.0")
    assert "max_scale defaults to 2**15" in message and "a seed above 65504 is inf" in message
    assert message.endswith(
        "start at 2**15, or pass max_scale=65536 too for a loss computed in float32"
    )


def test_the_fix_the_message_names_is_accepted():
    assert DynamicScale(init_scale=2**16, max_scale=2**16).init_scale == 2**16
    assert DynamicScale(init_scale=0.5, min_scale=0.5).init_scale == 0.5


def test_a_start_below_min_scale_names_min_scale():
    with pytest.raises(
        ValueError,
        match=r"init_scale=0.5, max_scale=32768.0; to start there pass min_scale=0.5 too$",
    ):
        DynamicScale(init_scale=0.5)
