"""Scaling policies' settings and states: each checked by name, arrays element by element,
every reachable state accepted, the rest refused."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from updater.policy import (
    DynamicScale,
    HeadroomScale,
    NnablaLegacy,
    ScaleState,
    StaticScale,
    policy_from_dict,
)

# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "cls, kwargs, name",
    [
        (StaticScale, {"scale": 0.0}, "scale"),
        (StaticScale, {"scale": float("nan")}, "scale"),
        (StaticScale, {"scale": float("inf")}, "scale"),
        (DynamicScale, {"growth_factor": 1.0}, "growth_factor"),
        (DynamicScale, {"growth_factor": 0.5}, "growth_factor"),
        (DynamicScale, {"backoff_factor": 1.0}, "backoff_factor"),
        (DynamicScale, {"backoff_factor": 2.0}, "backoff_factor"),
        (DynamicScale, {"backoff_factor": 0.0}, "backoff_factor"),
        (DynamicScale, {"growth_interval": 0}, "growth_interval"),
        (DynamicScale, {"growth_interval": 2.5}, "growth_interval"),
        (DynamicScale, {"hysteresis": 0}, "hysteresis"),
        (DynamicScale, {"min_scale": -1.0}, "min_scale"),
        (DynamicScale, {"max_scale": float("inf")}, "max_scale"),
        (DynamicScale, {"init_scale": float("nan")}, "init_scale"),
        (DynamicScale, {"init_scale": 2.0**16}, "init_scale"),
        (DynamicScale, {"init_scale": 0.5}, "init_scale"),
        (DynamicScale, {"min_scale": 4.0, "init_scale": 2.0, "max_scale": 8.0}, "min_scale"),
        (NnablaLegacy, {"scale": -1.0}, "scale"),
        (NnablaLegacy, {"scaling_factor": 1.0}, "scaling_factor"),
        (NnablaLegacy, {"N": 0}, "N"),
        (HeadroomScale, {"margin": 0.5}, "margin"),
        (HeadroomScale, {"backoff_factor": 1.5}, "backoff_factor"),
        (HeadroomScale, {"growth_factor": 1.0}, "growth_factor"),
    ],
)
def test_invalid_setting_names_setting_and_value(cls, kwargs, name):
    with pytest.raises(ValueError) as err:
        cls(**kwargs)
    msg = str(err.value)
    assert name in msg
    assert repr(kwargs[name]) in msg


@pytest.mark.parametrize(
    "cls, kwargs, name",
    [
        (DynamicScale, {"growth_interval": True}, "growth_interval"),
        (DynamicScale, {"hysteresis": True}, "hysteresis"),
        (DynamicScale, {"growth_interval": "2000"}, "growth_interval"),
        (HeadroomScale, {"init_scale": "8"}, "init_scale"),
        (NnablaLegacy, {"N": None}, "N"),
    ],
)
def test_a_setting_of_the_wrong_type_raises_type_error(cls, kwargs, name):
    """One rule for the package: wrong type -> TypeError, wrong value -> ValueError."""
    with pytest.raises(TypeError) as err:
        cls(**kwargs)
    assert name in str(err.value) and repr(kwargs[name]) in str(err.value)


def test_whole_float_int_settings_are_stored_as_ints():
    p = DynamicScale(growth_interval=500.0, hysteresis=2.0)
    assert (p.growth_interval, p.hysteresis) == (500, 2)
    assert type(p.growth_interval) is int and type(NnablaLegacy(N=10.0).N) is int


@pytest.mark.parametrize("value", [1, 0, "yes", None, 1.0])
def test_consecutive_hysteresis_must_be_a_bool(value):
    with pytest.raises(TypeError) as err:
        DynamicScale(consecutive_hysteresis=value)
    msg = str(err.value)
    assert "consecutive_hysteresis" in msg and repr(value) in msg and "bool" in msg


@pytest.mark.parametrize("value", [True, False, np.bool_(True)])
def test_consecutive_hysteresis_round_trips_through_json(value):
    p = DynamicScale(hysteresis=3, consecutive_hysteresis=value)
    d = json.loads(json.dumps(p.state_dict()))
    assert d["consecutive_hysteresis"] is bool(value)
    again = policy_from_dict(d)
    assert again == p and again.consecutive_hysteresis is bool(value)


def test_policy_from_dict_rejects_unknown():
    with pytest.raises(ValueError, match="policy must be one of"):
        policy_from_dict({"policy": "Nope"})
    with pytest.raises(ValueError, match="unknown settings"):
        policy_from_dict({"policy": "StaticScale", "scale": 2.0, "bogus": 1})


def test_state_from_dict_names_missing_key():
    with pytest.raises(KeyError, match="hysteresis_left"):
        ScaleState.from_dict({"scale": 1.0, "good_steps": 0})


def test_array_settings_are_validated_element_by_element():
    """Many settings at once (sim.replay.run.stack_policies) go through the same checks."""
    p = DynamicScale(growth_interval=np.array([500, 2000]), hysteresis=np.array([1, 2]))
    state = p.update(p.init((2,)), np.array([False, False]))
    assert state.scale.tolist() == [2.0**14, 2.0**15]  # hysteresis 1 backs off, 2 does not
    with pytest.raises(ValueError, match="growth_interval must be an int >= 1, got 0"):
        DynamicScale(growth_interval=np.array([500, 0]))
    with pytest.raises(ValueError, match="backoff_factor"):
        HeadroomScale(backoff_factor=np.array([0.5, 1.5]))


@given(
    st.sampled_from(
        [
            StaticScale(4.0),
            DynamicScale(init_scale=2.0**10, growth_interval=3, hysteresis=3),
            DynamicScale(growth_interval=2, hysteresis=2, consecutive_hysteresis=True),
            NnablaLegacy(scale=8.0, N=3),
            HeadroomScale(),
        ]
    ),
    st.lists(st.sampled_from(["finite", "overflow", "bad"]), max_size=40),
)
def test_every_reachable_state_passes_the_policys_check(policy, outcomes):
    """``check_state`` (what a checkpoint's saved state must satisfy) holds for every state a
    run reaches, so it never refuses a checkpoint the updater wrote."""
    state = policy.init()
    policy.check_state(state)
    for outcome in outcomes:
        finite = outcome == "finite"
        absmax = 100.0 if finite else float("inf")
        state = policy.update(state, finite, absmax, bad_batch=outcome == "bad")
        policy.check_state(state)


def test_a_state_no_run_reaches_is_refused_by_name():
    with pytest.raises(ValueError, match=r"hysteresis_left must be a whole number in \[1, 2\]"):
        DynamicScale(hysteresis=2).check_state(ScaleState(1024.0, 0, 3))
    with pytest.raises(ValueError, match="good_steps"):
        NnablaLegacy(N=3).check_state(ScaleState(8.0, 5, 1))
    with pytest.raises(ValueError, match="hysteresis_left"):
        StaticScale(4.0).check_state(ScaleState(4.0, 0, 2))
