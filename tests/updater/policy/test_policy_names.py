"""Policy names in Python follow the CLI's rule (issue 41): any case, a "did you mean" when
unknown (``updater.common.names``, the one rule for every typed name)."""

import pytest

from updater import PRESETS, DynamicScale, make_policy
from updater.policy import as_policy


@pytest.mark.parametrize(
    "typed, expected",
    [
        ("DeepSpeed", PRESETS["deepspeed"]),
        ("DYNAMIC", PRESETS["dynamic"]),
        ("dynamicscale", DynamicScale()),
        ("deepspeed", PRESETS["deepspeed"]),
    ],
)
def test_make_policy_takes_names_in_any_case(typed, expected):
    assert make_policy(typed) == expected and as_policy(typed) == expected


def test_an_unknown_name_names_the_closest_and_every_choice():
    with pytest.raises(ValueError) as error:
        make_policy("dynamik", growth_interval=50)
    message = str(error.value)
    assert message.startswith("policy must be one of ['nnabla-legacy',")
    assert message.endswith("got 'dynamik' (did you mean 'dynamic' or 'DynamicScale'?)")


def test_a_name_nothing_resembles_gets_no_suggestion():
    with pytest.raises(ValueError, match=r"got 'zzz'$"):
        make_policy("zzz")
