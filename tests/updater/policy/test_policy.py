"""Scaling policies: narrated examples, closed forms, the headroom jump and nnabla's legacy rule."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.updater.policy.policy_cases import ASYM, as_tuple, run
from updater.policy import (
    DynamicScale,
    HeadroomScale,
    NnablaLegacy,
    StaticScale,
    largest_safe_scale,
)

# ---------------------------------------------------------------- narrated examples


def test_dynamic_asymmetric_narrated():
    p = DynamicScale(**ASYM)
    s = p.init()
    assert as_tuple(s) == (64.0, 0, 2)
    s = p.update(s, True)  # 1st finite step: count 1
    assert as_tuple(s) == (64.0, 1, 2)
    s = p.update(s, True)  # 2nd finite step: count 2
    assert as_tuple(s) == (64.0, 2, 2)
    s = p.update(s, True)  # 3rd consecutive finite step: grow x2, count resets
    assert as_tuple(s) == (128.0, 0, 2)
    s = p.update(s, True)
    s = p.update(s, False)  # 1st overflow: hysteresis absorbs it, count resets
    assert as_tuple(s) == (128.0, 0, 1)
    s = p.update(s, True)  # finite steps do not refill hysteresis
    assert as_tuple(s) == (128.0, 1, 1)
    s = p.update(s, False)  # 2nd overflow since the last growth: back off x0.25, no refill
    assert as_tuple(s) == (32.0, 0, 1)
    s = p.update(s, False)  # hysteresis used up: every further overflow backs off
    assert as_tuple(s) == (8.0, 0, 1)
    for _ in range(3):  # only growth refills hysteresis
        s = p.update(s, True)
    assert as_tuple(s) == (16.0, 0, 2)
    s = p.update(s, False)  # absorbed again after the refill
    assert as_tuple(s) == (16.0, 0, 1)


def test_dynamic_consecutive_hysteresis_narrated():
    p = DynamicScale(**ASYM, consecutive_hysteresis=True)
    s = p.update(p.init(), False)  # 1st overflow: absorbed
    assert as_tuple(s) == (64.0, 0, 1)
    s = p.update(s, True)  # a finite step refills hysteresis
    assert as_tuple(s) == (64.0, 1, 2)
    s = p.update(s, False)  # absorbed again
    assert as_tuple(s) == (64.0, 0, 1)
    s = p.update(s, False)  # 2nd overflow in a row: back off x0.25
    assert as_tuple(s) == (16.0, 0, 1)
    s = p.update(s, False)  # overflows in a row keep backing off
    assert as_tuple(s) == (4.0, 0, 1)


@pytest.mark.parametrize(
    "consecutive, expected",
    [(False, [1024.0, 1024.0, 512.0, 256.0]), (True, [1024.0, 1024.0, 1024.0, 512.0])],
)
def test_hysteresis_closed_form_example(consecutive, expected):
    """Hysteresis 2, start 1024, no growth; steps overflow, finite, overflow, overflow."""
    p = DynamicScale(
        init_scale=1024.0,
        growth_interval=10**6,
        hysteresis=2,
        consecutive_hysteresis=consecutive,
    )
    assert [float(s.scale) for s in run(p, [False, True, False, False])] == expected


@pytest.mark.parametrize("consecutive", [False, True])
def test_persistent_overflow_from_2_15_reaches_1_in_16_steps(consecutive):
    """As Megatron-LM, DeepSpeed and apex: one absorbed overflow, then 15 halvings."""
    p = DynamicScale(hysteresis=2, init_scale=2.0**15, consecutive_hysteresis=consecutive)
    scales = [float(s.scale) for s in run(p, [False] * 20)]
    assert scales[:16] == [2.0**15] + [2.0 ** (15 - k) for k in range(1, 16)]
    assert scales.index(1.0) == 15  # reached after exactly 16 steps, then floored
    assert scales[16:] == [1.0] * 4


def test_dynamic_bounds_clamp_both_ways():
    p = DynamicScale(**{**ASYM, "init_scale": 2.0**11, "hysteresis": 1})
    s = p.init()
    for _ in range(3):
        s = p.update(s, True)
    assert float(s.scale) == 2.0**12  # grown to the cap
    for _ in range(3):
        s = p.update(s, True)
    assert float(s.scale) == 2.0**12  # stays at the cap; counter still resets
    assert int(s.good_steps) == 0
    for _ in range(10):
        s = p.update(s, False)
    assert float(s.scale) == 1.0  # floored, never 0


def test_growth_never_non_finite():
    p = DynamicScale(init_scale=1e300, growth_factor=1e10, max_scale=1e308, growth_interval=1)
    s = p.update(p.init(), True)
    assert math.isfinite(float(s.scale)) and float(s.scale) == 1e308


def test_static_never_changes():
    p = StaticScale(128.0)
    states = run(p, [True, False, True, True, False])
    assert [float(s.scale) for s in states] == [128.0] * 5
    assert [int(s.good_steps) for s in states] == [1, 0, 1, 2, 0]


def test_headroom_jumps_to_largest_safe_power_of_two():
    p = HeadroomScale(init_scale=1.0, margin=2.0, min_scale=2.0**-10, max_scale=2.0**20)
    # unscaled absmax 3.0: largest s with s*3*2 <= 65504 is 2**13 (8192*6 = 49152).
    s = p.update(p.init(), True, 3.0 * 1.0)
    assert float(s.scale) == 2.0**13
    # measured at the new scale the same gradient gives the same target
    s = p.update(s, True, 3.0 * 2.0**13)
    assert float(s.scale) == 2.0**13
    s = p.update(s, False, np.inf)  # overflow: x 2**-8
    assert float(s.scale) == 2.0**5
    s = p.update(s, True, 0.0)  # no nonzero gradient: grow by growth_factor
    assert float(s.scale) == 2.0**6


def test_headroom_needs_absmax():
    with pytest.raises(ValueError, match="grad_absmax"):
        HeadroomScale().update(HeadroomScale().init(), True)


@pytest.mark.parametrize("start_exp", range(0, 16))
@pytest.mark.parametrize("absmax_exp", [-6, -2, 0, 3, 7, 11, 15])
def test_headroom_converges_within_three_steps(start_exp, absmax_exp):
    """From any start in [1, 2**15], within a factor 2 of the largest safe scale in <= 3 steps."""
    p = HeadroomScale(init_scale=2.0**start_exp)
    rng = np.random.default_rng(start_exp * 100 + absmax_exp + 50)
    s = p.init()
    true_max = 2.0**absmax_exp
    safe = min(float(largest_safe_scale(true_max)), p.max_scale)
    safe = max(safe, p.min_scale)
    for _ in range(3):
        step_max = true_max * rng.uniform(0.5, 1.0)  # stationary: below the true max
        scaled = step_max * float(s.scale)
        finite = scaled < 65520
        s = p.update(s, finite, scaled if finite else np.inf)
    assert safe / 2 <= float(s.scale) <= safe


def test_dynamic_needs_thousands_where_headroom_needs_three():
    d = DynamicScale(init_scale=1.0)
    s = d.init()
    steps = 0
    while float(s.scale) < 2.0**14:
        s = d.update(s, True)
        steps += 1
    assert steps == 14 * d.growth_interval


# ---------------------------------------------------------------- closed forms


@given(st.lists(st.booleans(), max_size=60), st.integers(1, 5))
def test_dynamic_closed_form_unbounded(flags, interval):
    """Without hysteresis and away from the bounds, scale = init * g**growths * b**overflows,
    where each run of n consecutive finite steps gives floor(n / interval) growths."""
    p = DynamicScale(
        init_scale=2.0**0,
        growth_factor=2.0,
        backoff_factor=0.5,
        growth_interval=interval,
        min_scale=2.0**-100,
        max_scale=2.0**100,
        hysteresis=1,
    )
    states = run(p, flags)
    growths = overflows = run_len = 0
    for ok, state in zip(flags, states):
        if ok:
            run_len += 1
            grew_now = run_len % interval == 0
            growths += grew_now
            assert int(state.good_steps) == run_len % interval
        else:
            overflows += 1
            run_len = 0
            assert int(state.good_steps) == 0
        assert float(state.scale) == 2.0 ** (growths - overflows)


@given(st.integers(1, 50), st.integers(0, 200))
def test_growth_exactly_on_interval_th_finite_step(interval, n):
    p = DynamicScale(init_scale=1.0, growth_interval=interval, max_scale=2.0**250)
    states = run(p, [True] * n)
    grew_at = [
        i + 1 for i in range(n) if float(states[i].scale) != (states[i - 1].scale if i else 1.0)
    ]
    assert grew_at == [k * interval for k in range(1, n // interval + 1)]


@given(st.lists(st.booleans(), max_size=80), st.booleans())
def test_bounded_product_with_hysteresis(flags, consecutive):
    """With bounds and hysteresis, the scale is the clamped running product of applied factors."""
    p = DynamicScale(**ASYM, consecutive_hysteresis=consecutive)
    scale, count, left = ASYM["init_scale"], 0, ASYM["hysteresis"]
    for ok, state in zip(flags, run(p, flags)):
        if ok:
            count += 1
            if consecutive:
                left = ASYM["hysteresis"]
            if count == ASYM["growth_interval"]:
                scale, count, left = min(scale * 2.0, ASYM["max_scale"]), 0, ASYM["hysteresis"]
        else:
            count = 0
            if left == 1:
                scale = max(scale * 0.25, ASYM["min_scale"])
            else:
                left -= 1
        assert as_tuple(state) == (scale, count, left)


@given(st.lists(st.booleans(), max_size=80), st.integers(1, 4), st.booleans())
def test_hysteresis_closed_form_without_growth(flags, h, consecutive):
    """No growth, no bounds reached: the scale is init * 0.5**backoffs, where k overflows back
    off max(0, k - h + 1) times, k counting all overflows (only growth refills) or, with
    consecutive_hysteresis, each run of overflows in a row separately."""
    p = DynamicScale(
        init_scale=1.0,
        growth_interval=10**6,
        min_scale=2.0**-100,
        max_scale=1.0,
        hysteresis=h,
        consecutive_hysteresis=consecutive,
    )
    states = run(p, flags)
    for t, state in enumerate(states):
        seen = flags[: t + 1]
        if consecutive:
            runs, n = [], 0
            for ok in seen:
                if ok:
                    runs.append(n)
                    n = 0
                else:
                    n += 1
            runs.append(n)
        else:
            runs = [seen.count(False)]
        backoffs = sum(max(0, k - h + 1) for k in runs)
        assert float(state.scale) == 0.5**backoffs


# ---------------------------------------------------------------- nnabla legacy


def legacy_reference(flags, scale=8.0, factor=2.0, n=2000):
    """The old updater's arithmetic, transcribed as plain Python over steps."""
    counter, out = 0, []
    for ok in flags:
        if ok:
            if counter > n:
                scale *= factor
                counter = 0
            counter += 1
        else:
            scale /= factor
            counter = 0
        out.append(scale)
    return out


def test_legacy_growth_timing_n_plus_2_then_n_plus_1():
    n = 5
    scales = [float(s.scale) for s in run(NnablaLegacy(N=n), [True] * 30)]
    grew_at = [i + 1 for i in range(30) if scales[i] != (scales[i - 1] if i else 8.0)]
    assert grew_at == [n + 2, 2 * n + 3, 3 * n + 4, 4 * n + 5]


def test_legacy_overflow_divides_and_restarts_count():
    n = 3
    flags = [True] * 4 + [False] + [True] * 5
    scales = [float(s.scale) for s in run(NnablaLegacy(N=n), flags)]
    # 4 finite steps: no growth yet (needs N+2 = 5); overflow halves; growth again after 5 more
    assert scales == [8.0] * 4 + [4.0] * 5 + [8.0]


def test_legacy_reaches_zero_like_the_original():
    state = NnablaLegacy().init()
    p = NnablaLegacy()
    for _ in range(1111):
        state = p.update(state, False)
    assert float(state.scale) == 0.0


@given(st.lists(st.booleans(), max_size=100), st.integers(1, 6))
def test_legacy_matches_reference(flags, n):
    got = [float(s.scale) for s in run(NnablaLegacy(N=n), flags)]
    assert got == legacy_reference(flags, n=n)
