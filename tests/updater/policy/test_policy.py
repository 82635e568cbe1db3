"""Scaling policies: narrated examples, closed forms, a reference state machine, vectorization."""

import json
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from updater.common.float16 import FP16_MAX
from updater.policy import (
    DynamicScale,
    HeadroomScale,
    NnablaLegacy,
    ScaleState,
    StaticScale,
    largest_safe_scale,
    policy_from_dict,
)

ASYM = dict(
    init_scale=64.0,
    growth_factor=2.0,
    backoff_factor=0.25,
    growth_interval=3,
    min_scale=1.0,
    max_scale=2.0**12,
    hysteresis=2,
)


def run(policy, flags, absmax=None):
    """Advance one run over a sequence of flags; return the list of states after each step."""
    state = policy.init()
    out = []
    for i, ok in enumerate(flags):
        state = policy.update(state, ok, None if absmax is None else absmax[i])
        out.append(state)
    return out


def as_tuple(state):
    return (float(state.scale), int(state.good_steps), int(state.hysteresis_left))


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


# ---------------------------------------------------------------- round trips, vectorization

powers = st.integers(-10, 15).map(lambda k: 2.0**k)


@st.composite
def policies(draw):
    kind = draw(st.sampled_from(["static", "dynamic", "legacy", "headroom"]))
    if kind == "static":
        return StaticScale(draw(powers))
    if kind == "legacy":
        return NnablaLegacy(
            draw(powers), draw(st.sampled_from([2.0, 4.0, 1.5])), draw(st.integers(1, 5))
        )
    lo, hi = sorted([draw(st.integers(-10, 15)), draw(st.integers(-10, 15))])
    init = 2.0 ** draw(st.integers(lo, hi))
    if kind == "headroom":
        return HeadroomScale(
            init_scale=init,
            margin=draw(st.sampled_from([1.0, 2.0, 4.0])),
            backoff_factor=2.0 ** -draw(st.integers(1, 8)),
            min_scale=2.0**lo,
            max_scale=2.0**hi,
        )
    return DynamicScale(
        init_scale=init,
        growth_factor=draw(st.sampled_from([2.0, 4.0, 1.5])),
        backoff_factor=draw(st.sampled_from([0.5, 0.25, 0.7])),
        growth_interval=draw(st.integers(1, 6)),
        min_scale=2.0**lo,
        max_scale=2.0**hi,
        hysteresis=draw(st.integers(1, 3)),
        consecutive_hysteresis=draw(st.booleans()),
    )


steps = st.lists(st.tuples(st.booleans(), st.floats(0, 65504, width=16)), max_size=40)


@given(policies(), steps)
def test_round_trip_policy_and_state(policy, seq):
    state = policy.init()
    for ok, a in seq:
        state = policy.update(state, ok, a)
    again = policy_from_dict(policy.state_dict())
    assert again == policy
    restored = ScaleState.from_dict(state.to_dict())
    assert as_tuple(restored) == as_tuple(state)
    # continuing from the restored copy gives the same states
    for ok, a in seq:
        state = policy.update(state, ok, a)
        restored = again.update(restored, ok, a)
        assert as_tuple(restored) == as_tuple(state)


@given(policies(), st.integers(1, 8), st.integers(0, 30), st.data())
def test_vectorized_equals_scalar(policy, k, n, data):
    flags = data.draw(hnp.arrays(bool, (n, k)))
    # bounded floats: unbounded width-16 floats reject every draw above 65520 (flaky health
    # check "filter_too_much"); inf is added explicitly
    elements = st.floats(0, 65504, width=16) | st.just(np.inf)
    absmax = data.draw(hnp.arrays(np.float16, (n, k), elements=elements)).astype(np.float64)
    vec = policy.init((k,))
    singles = [policy.init() for _ in range(k)]
    for t in range(n):
        vec = policy.update(vec, flags[t], absmax[t])
        singles = [policy.update(s, flags[t, j], absmax[t, j]) for j, s in enumerate(singles)]
        for j in range(k):
            assert as_tuple(ScaleState(*(np.asarray(f)[j] for f in vec))) == as_tuple(singles[j])


@given(
    st.lists(st.tuples(st.integers(1, 3), st.booleans()), min_size=1, max_size=6),
    st.data(),
)
def test_stacked_settings_include_consecutive_hysteresis(settings_list, data):
    """sim.replay.run.stack_policies turns every setting, the bool one included, into an array; the
    stacked policy advances each run exactly as its own policy does."""
    from sim.replay.run import stack_policies

    pols = [
        DynamicScale(**{**ASYM, "hysteresis": h, "consecutive_hysteresis": c})
        for h, c in settings_list
    ]
    stacked = stack_policies(pols, runs=2)
    assert stacked.consecutive_hysteresis.dtype == bool
    k = 2 * len(pols)
    flags = data.draw(hnp.arrays(bool, (30, k)))
    vec = stacked.init((k,))
    singles = [pols[j // 2].init() for j in range(k)]
    for t in range(flags.shape[0]):
        vec = stacked.update(vec, flags[t])
        singles = [pols[j // 2].update(s, flags[t, j]) for j, s in enumerate(singles)]
        for j in range(k):
            assert as_tuple(ScaleState(*(np.asarray(f)[j] for f in vec))) == as_tuple(singles[j])


# ---------------------------------------------------------------- stateful, against a reference


class ReferenceDynamic:
    """Independent plain-Python model of DynamicScale's rules, written after DeepSpeed's
    DynamicLossScaler.update_scale (delayed_shift = hysteresis, cur_hysteresis = left)."""

    def __init__(self, p):
        self.p, self.scale, self.count, self.left = p, p.init_scale, 0, p.hysteresis

    def step(self, ok):
        p = self.p
        if ok:
            if p.consecutive_hysteresis:
                self.left = p.hysteresis
            self.count += 1
            if self.count == p.growth_interval:
                self.scale = min(self.scale * p.growth_factor, p.max_scale)
                self.count, self.left = 0, p.hysteresis
        else:
            self.count = 0
            if p.hysteresis == 1 or self.left == 1:
                self.scale = max(self.scale * p.backoff_factor, p.min_scale)
            else:
                self.left -= 1


class ReferenceHeadroom:
    """Independent plain-Python model of HeadroomScale's rules."""

    def __init__(self, p):
        self.p, self.scale, self.count, self.left = p, p.init_scale, 0, 1

    def step(self, ok, absmax):
        p = self.p
        if not ok:
            self.count = 0
            self.scale = max(self.scale * p.backoff_factor, p.min_scale)
            return
        self.count += 1
        if absmax > 0:
            unscaled = absmax / self.scale
            need = unscaled * p.margin
            k = next(k for k in range(1023, -1100, -1) if need * 2.0**k <= FP16_MAX)
            new = 2.0**k
        else:
            new = self.scale * p.growth_factor
        self.scale = min(max(new, p.min_scale), p.max_scale)


class PolicyMachine(RuleBasedStateMachine):
    """Drive DynamicScale or HeadroomScale with finite steps, overflows and save/restore."""

    @initialize(policy=policies().filter(lambda p: isinstance(p, (DynamicScale, HeadroomScale))))
    def start(self, policy):
        self.policy = policy
        self.state = policy.init()
        if isinstance(policy, DynamicScale):
            self.ref = ReferenceDynamic(policy)
        else:
            self.ref = ReferenceHeadroom(policy)

    def _step(self, ok, absmax):
        self.state = self.policy.update(self.state, ok, absmax)
        if isinstance(self.ref, ReferenceDynamic):
            self.ref.step(ok)
        else:
            self.ref.step(ok, absmax)

    @rule(absmax=st.floats(0, 65504, width=16))
    def finite_step(self, absmax):
        self._step(True, absmax)

    @rule()
    def overflow_step(self):
        self._step(False, np.inf)

    @precondition(lambda self: hasattr(self, "policy"))
    @rule()
    def save_and_restore(self):
        self.policy = policy_from_dict(self.policy.state_dict())
        self.state = ScaleState.from_dict(self.state.to_dict())

    @invariant()
    def matches_reference_and_bounds(self):
        if not hasattr(self, "policy"):
            return
        p, (scale, count, left) = self.policy, as_tuple(self.state)
        assert (scale, count, left) == (self.ref.scale, self.ref.count, self.ref.left)
        assert math.isfinite(scale) and scale > 0
        assert p.min_scale <= scale <= p.max_scale
        assert count >= 0
        if isinstance(p, DynamicScale):
            assert count < p.growth_interval
            assert 1 <= left <= p.hysteresis


TestPolicyMachine = PolicyMachine.TestCase
TestPolicyMachine.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)


# ---------------------------------------------------------------- import hygiene


@given(st.floats(min_value=0, max_value=65520, allow_subnormal=True), st.integers(-10, 15))
@example(2.0**-25, 0)
@example(2.0**-24, 0)
@example(2.0**-14, 3)
@example(65504.0, 15)
@example(65520.0, -10)
@example(0.0, 2)
def test_headroom_step_matches_reference(absmax, exp):
    p = HeadroomScale(init_scale=2.0**exp, min_scale=2.0**-10, max_scale=2.0**15)
    ref = ReferenceHeadroom(p)
    ref.step(True, absmax)
    assert float(p.update(p.init(), True, absmax).scale) == ref.scale


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
