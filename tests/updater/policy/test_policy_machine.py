"""Scaling policies against references: JSON round trips, vectorized runs equal scalar ones,
and a stateful machine against plain-Python models of the rules."""

import math

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.updater.policy.policy_cases import ASYM, as_tuple, policies, steps
from updater.common.float16 import FP16_MAX
from updater.policy import (
    DynamicScale,
    HeadroomScale,
    ScaleState,
    policy_from_dict,
)

# ---------------------------------------------------------------- round trips, vectorization


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
