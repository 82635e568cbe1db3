"""Policy names in Python follow the CLI's rule (issue 41): any case, a "did you mean" when
unknown (``updater.common.names``, the one rule for every typed name)."""

from dataclasses import fields

import pytest

from updater import PRESETS, DynamicScale, make_policy
from updater.policy import POLICIES, as_policy


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


@pytest.mark.parametrize("policy", POLICIES.values(), ids=list(POLICIES))
def test_a_policys_misspelt_setting_names_the_setting(policy):
    """Issue 52: ``DynamicScale(growth_intervall=5)`` gave Python's plain ``TypeError``; the
    suggestion is the updater's own rule (``updater.common.names``)."""
    setting = fields(policy)[0].name
    with pytest.raises(TypeError) as error:
        policy(**{setting + "x": 1})
    assert str(error.value).startswith(
        f"{policy.__name__} got an unexpected keyword argument {setting + 'x'!r} "
        f"(did you mean {setting!r}"
    )
    assert policy() == policy(**{setting: getattr(policy(), setting)})  # right names still work
