"""Policy trajectories over traces (sim/replay/run.py), including the real updater's equivalence."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.casting.counts import classify
from sim.casting.underflow import flushed_share
from sim.replay.metrics import run_metrics
from sim.replay.run import (
    jitter_factors,
    simulate,
    simulate_many,
    simulate_scalar,
    stack_policies,
)
from sim.traces.families import make_trace
from updater.common.float16 import FP16_OVERFLOW
from updater.policy import DynamicScale, HeadroomScale, NnablaLegacy, StaticScale
from updater.policy.presets import PRESETS, make_policy
from updater.trace import Trace

POLICIES = [
    PRESETS["nnabla-legacy"],
    PRESETS["pytorch"],
    PRESETS["deepspeed"],
    PRESETS["dynamic"],
    PRESETS["headroom"],
    StaticScale(2.0**10),
    DynamicScale(
        init_scale=2.0**13,
        growth_factor=4.0,
        backoff_factor=0.25,
        growth_interval=7,
        min_scale=2.0**-3,
        max_scale=2.0**14,
        hysteresis=3,
    ),
    HeadroomScale(init_scale=2.0, margin=1.5, backoff_factor=0.5, max_scale=2.0**14),
]


def _with_nonfinite(trace, nonfinite):
    return Trace(trace.counts, trace.zeros, trace.absmax, nonfinite, name=trace.name)


@pytest.mark.parametrize("family", ["stationary", "spikes", "nan", "drifting"])
@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: type(p).__name__)
def test_vectorized_equals_per_run_scalar_loop(policy, family):
    trace = make_trace(family, steps=250, seed=1, **({"nan_prob": 0.03} if family == "nan" else {}))
    result = simulate(policy, trace, runs=4, seed=5, jitter=0.5)
    scale, overflow = simulate_scalar(policy, trace, runs=4, seed=5, jitter=0.5)
    assert np.array_equal(result.scale, scale[:-1])
    assert np.array_equal(result.metrics["final_scale"], scale[-1])
    assert np.array_equal(result.overflow, overflow)


@given(
    interval=st.integers(1, 20),
    hysteresis=st.integers(1, 3),
    log2_init=st.integers(0, 15),
    seed=st.integers(0, 2**16),
)
def test_vectorized_equals_scalar_for_generated_settings(interval, hysteresis, log2_init, seed):
    policy = DynamicScale(
        init_scale=2.0**log2_init, growth_interval=interval, hysteresis=hysteresis
    )
    trace = make_trace("nan", steps=60, seed=seed % 7, nan_prob=0.05)
    result = simulate(policy, trace, runs=3, seed=seed, jitter=0.7)
    scale, overflow = simulate_scalar(policy, trace, runs=3, seed=seed, jitter=0.7)
    assert np.array_equal(result.scale, scale[:-1]) and np.array_equal(result.overflow, overflow)


def test_stacked_settings_equal_separate_runs():
    trace = make_trace("nan", steps=400, seed=2, nan_prob=0.02)
    results = simulate_many(POLICIES, trace, runs=3, seed=9)
    for policy, many in zip(POLICIES, results):
        alone = simulate(policy, trace, runs=3, seed=9)
        assert np.array_equal(many.scale, alone.scale)
        assert np.array_equal(many.overflow, alone.overflow)
        for key, value in alone.metrics.items():
            assert np.array_equal(many.metrics[key], value, equal_nan=True), key


def test_simulate_many_takes_a_trace_name_as_simulate_does():
    """The docstring says "as in simulate": a family's name is made with ``seed``."""
    many = simulate_many(["dynamic", "nnabla-legacy"], "spikes", runs=2, seed=3)
    for policy, result in zip(["dynamic", "nnabla-legacy"], many):
        alone = simulate(policy, "spikes", runs=2, seed=3)
        assert np.array_equal(result.scale, alone.scale)
        assert np.array_equal(result.overflow, alone.overflow)
    scale, overflow = simulate_scalar("dynamic", "spikes", runs=2, seed=3)
    assert np.array_equal(overflow, many[0].overflow)


def test_stack_policies_rejects_mixed_classes():
    with pytest.raises(TypeError, match="one class"):
        stack_policies([DynamicScale(), HeadroomScale()])


def test_overflow_rule_at_the_65520_boundary():
    below = np.nextafter(FP16_OVERFLOW, 0.0)
    trace = Trace.from_steps([[FP16_OVERFLOW], [below], [65504.0], [FP16_OVERFLOW / 2]])
    r = simulate(StaticScale(1.0), trace, runs=1, jitter=0.0)
    assert r.overflow[:, 0].tolist() == [True, False, False, False]
    r2 = simulate(StaticScale(2.0), trace, runs=1, jitter=0.0)
    assert r2.overflow[:, 0].tolist() == [True, True, True, True]
    # the rule is float16's: the scaled value rounds to inf exactly when flagged
    for t in range(trace.steps):
        for scale, result in ((1.0, r), (2.0, r2)):
            cast = classify([trace.absmax[t]], scale)
            assert (cast.overflow == 1) == bool(result.overflow[t, 0])


def test_metrics_of_a_small_hand_case():
    """StaticScale(8) over 5 one-value steps, one of them a bad batch.

    step: value   scaled*8     overflow  flushed  safe (largest 2^k with 2^k*v <= 65504)
    0:    2**-29  2**-26       no        yes      2**44 -> capped? no cap: 2**44
    1:    2**-20  2**-17       no        no       2**35
    2:    2**14   2**17        yes       no       2**1
    3:    2**12   2**15 (bad)  bad batch no       2**3
    4:    2**13   2**16        yes       no       2**2
    """
    values = [2.0**-29, 2.0**-20, 2.0**14, 2.0**12, 2.0**13]
    trace = _with_nonfinite(
        Trace.from_steps([[v] for v in values]), np.array([0, 0, 0, 1, 0], bool)
    )
    r = simulate(StaticScale(8.0), trace, runs=2, jitter=0.0)
    m = {k: v[0] for k, v in r.metrics.items()}
    assert r.overflow[:, 0].tolist() == [False, False, True, False, True]
    assert r.skipped[:, 0].tolist() == [False, False, True, True, True]
    assert m["overflows"] == 2 and m["skipped"] == 3
    assert r.flushed[:, 0].tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert m["mean_flushed"] == 0.5  # applied steps 0 and 1
    assert m["signal_lost"] == (1.0 + 0 + 1 + 1 + 1) / 5
    assert r.safe_scale[:, 0].tolist() == [2.0**44, 2.0**35, 2.0, 8.0, 4.0]
    # within 2x of safe first at step 3 (8 vs 8); below safe/2 at steps 0 and 1
    assert m["steps_to_safe"] == 3
    assert m["below_half_safe"] == 2 / 5
    assert m["final_scale"] == 8.0
    assert np.array_equal(r.metrics["overflows"], [2, 2])  # jitter 0: runs agree


def test_run_metrics_never_within_two_is_nan():
    scale = np.full((3, 1), 1.0)
    safe = np.full((3, 1), 64.0)
    m = run_metrics(
        scale,
        np.zeros((3, 1), bool),
        np.zeros((3, 1), bool),
        safe,
        np.zeros((3, 1)),
        np.zeros(3, bool),
    )
    assert math.isnan(m["steps_to_safe"][0]) and m["below_half_safe"][0] == 1.0


def test_flushed_share_is_exact_for_power_of_two_scales():
    """Away from the tie at 2**-25, the binade model gives float16's exact flushed share."""
    rng = np.random.default_rng(3)
    values = np.exp2(rng.uniform(-45.0, 0.0, 50_000))
    values = values[np.frexp(values)[0] != 0.5]  # no exact powers of two (the tie)
    trace = Trace.from_steps([values])
    for k in range(-5, 25):
        exact = classify(values, 2.0**k).share_flushed
        assert flushed_share(trace, 2.0**k)[0] == pytest.approx(exact, abs=1e-12), k


def test_flushed_share_interpolates_between_powers_of_two():
    rng = np.random.default_rng(4)
    values = np.exp2(rng.uniform(-40.0, -10.0, 200_000))  # log-uniform: interpolation is exact
    trace = Trace.from_steps([values])
    for scale in (3.0, 100.0, 2.0**10 * 1.7):
        exact = classify(values, scale).share_flushed
        assert flushed_share(trace, scale)[0] == pytest.approx(exact, abs=3e-3), scale
    assert flushed_share(trace, 0.0)[0] == 1.0  # a zero scale flushes everything


def test_jitter_makes_seeds_differ_and_zero_jitter_replays_exactly():
    trace = make_trace("stationary", steps=3000, seed=0)
    policy = DynamicScale(init_scale=2.0**15, growth_interval=100)
    a = simulate(policy, trace, runs=6, seed=1)
    b = simulate(policy, trace, runs=6, seed=2)
    assert not np.array_equal(a.scale, b.scale)
    assert len({tuple(col) for col in a.overflow.T}) > 1  # runs of one call differ too
    c = simulate(policy, trace, runs=6, seed=1, jitter=0.0)
    assert all(np.array_equal(c.scale[:, 0], c.scale[:, j]) for j in range(6))
    # run r's factors do not depend on how many runs are drawn
    assert np.array_equal(jitter_factors(50, 3, seed=4), jitter_factors(50, 7, seed=4)[:, :3])


def test_headroom_reaches_the_safe_band_fast_and_legacy_does_not():
    trace = make_trace("stationary", steps=3000, seed=0)
    head = simulate(HeadroomScale(init_scale=1.0), trace, runs=8, seed=0)
    legacy = simulate(NnablaLegacy(), trace, runs=8, seed=0)
    assert np.nanmax(head.metrics["steps_to_safe"]) <= 3
    assert np.isnan(legacy.metrics["steps_to_safe"]).all()  # 8 -> 2**13 needs ~20000 steps


def test_make_policy_and_bad_arguments():
    assert make_policy("deepspeed", hysteresis=3).hysteresis == 3
    assert make_policy("HeadroomScale", margin=4.0).margin == 4.0
    with pytest.raises(ValueError, match="policy must be one of"):
        make_policy("nope")
    with pytest.raises(ValueError, match="unknown settings"):
        make_policy("dynamic", margin=2.0)
    trace = make_trace("stationary", steps=10)
    with pytest.raises(ValueError, match="runs"):
        simulate(PRESETS["dynamic"], trace, runs=0)
    with pytest.raises(ValueError, match="jitter"):
        simulate(PRESETS["dynamic"], trace, jitter=-1.0)
    with pytest.raises(TypeError, match="policy"):
        simulate(None, trace)
    with pytest.raises(TypeError, match="trace"):
        simulate(PRESETS["dynamic"], np.zeros(3))
    with pytest.raises(ValueError, match="policies"):
        simulate_many([], trace)


@pytest.mark.nnabla
@pytest.mark.parametrize(
    "policy",
    [
        DynamicScale(init_scale=2.0**6, growth_interval=3, hysteresis=2, max_scale=2.0**10),
        HeadroomScale(init_scale=2.0**4, margin=2.0, backoff_factor=2.0**-3, max_scale=2.0**13),
        NnablaLegacy(scale=8.0, N=2),
    ],
    ids=lambda p: type(p).__name__,
)
def test_real_updater_and_simulator_give_the_same_trajectory(policy):
    """Drive the real updater (nnabla cpu:half) and the simulator with one gradient sequence.

    loss = sum(x * w) with w a parameter, so dL/dw = x: each step's gradient is the fed x.
    Huge entries force overflow on chosen steps, a NaN makes a bad batch.
    """
    pytest.importorskip("nnabla")
    import nnabla as nn
    import nnabla.functions as F
    import nnabla.solvers as S
    from nnabla.ext_utils import get_extension_context

    from updater import DynamicLossScalingUpdater

    base = np.array([1.0, -0.5, 0.25, 2.0**-6], np.float32)
    xs = []
    for t in range(24):
        x = base * 2.0 ** -(t % 4)  # varying largest gradient: 1, 1/2, 1/4, 1/8
        if t in (2, 3, 9, 15):
            x = x.copy()
            x[1] = 2048.0 * (1 + (t == 15) * 7)  # overflows at scale >= 32 (>= 4 on step 15)
        if t == 12:
            x = x.copy()
            x[2] = np.nan
        xs.append(x)
    trace = Trace.from_steps(xs, name="fed")
    assert trace.nonfinite.tolist() == [t == 12 for t in range(24)]

    scope = f"test_run_equivalence_{type(policy).__name__}"
    with nn.context_scope(get_extension_context("cpu", type_config="half")):
        with nn.parameter_scope(scope):
            x_var = nn.Variable((4,))
            w = nn.parameter.get_parameter_or_create("w", (4,), np.ones(4, np.float32))
            loss = F.sum(x_var * w)
            solver = S.Sgd(lr=0.0)
            solver.set_parameters(nn.get_parameters())
    feed = iter(xs)

    def feeder():
        x_var.d = next(feed)

    upd = DynamicLossScalingUpdater(solver, loss, data_feeder=feeder, policy=policy)
    records = [upd.update() for _ in xs]
    sim = simulate(policy, trace, runs=2, jitter=0.0)
    assert [r.scale for r in records] == sim.scale[:, 0].tolist()
    assert [not r.update_applied for r in records] == sim.skipped[:, 0].tolist()
    assert records[-1].new_scale == sim.metrics["final_scale"][0]
    # the sequence exercised both directions
    assert sim.overflow[:, 0].any() and len(set(sim.scale[:, 0])) >= 3


# ---------------------------------------------------------------- recorded overflows


def _recorded(trace, overflow_scale, nonfinite=None):
    nonfinite = trace.nonfinite if nonfinite is None else nonfinite
    return Trace(trace.counts, trace.zeros, trace.absmax, nonfinite, trace.name, overflow_scale)


def test_recorded_overflow_replays_as_overflow_from_its_scale_up_and_normal_below():
    """Steps with small gradients; step 1 was recorded overflowing at 2**10, step 2 is bad data.

    The absmax rule alone would never fire (|g| <= 1 at scales <= 2**15)."""
    trace = _recorded(
        Trace.from_steps([[1.0, 2.0**-20]] * 4),
        [math.inf, 2.0**10, math.inf, 3.0],
        np.array([False, False, True, False]),
    )
    cases = {
        2.0**9: [False, False, False, True],
        np.nextafter(2.0**10, 0.0): [False, False, False, True],
        2.0**10: [False, True, False, True],
        2.0**15: [False, True, False, True],
        2.0: [False, False, False, False],
        3.0: [False, False, False, True],
    }
    for scale, expected in cases.items():
        r = simulate(StaticScale(scale), trace, runs=2, jitter=0.0)
        assert r.overflow[:, 0].tolist() == expected, scale
        skipped = [e or t == 2 for t, e in enumerate(expected)]
        assert r.skipped[:, 0].tolist() == skipped, scale
        # overflows count recorded overflows, never the bad batch; skipped counts both
        assert r.metrics["overflows"][0] == sum(expected), scale
        assert r.metrics["skipped"][0] == sum(skipped), scale
        scalar, overflow = simulate_scalar(StaticScale(scale), trace, runs=2, jitter=0.0)
        assert np.array_equal(overflow, r.overflow), scale


def test_bad_batch_stays_bad_at_every_scale_even_with_a_recorded_threshold():
    trace = _recorded(Trace.from_steps([[1.0]] * 2), [math.inf, 8.0], np.array([False, True]))
    for scale in (2.0**-4, 1.0, 8.0, 2.0**15):
        r = simulate(StaticScale(scale), trace, runs=1, jitter=0.0)
        assert r.skipped[:, 0].tolist() == [False, True]
        assert r.metrics["overflows"][0] == 0 and r.metrics["skipped"][0] == 1


def test_recorded_threshold_caps_the_safe_scale_and_follows_the_jitter():
    trace = _recorded(Trace.from_steps([[1.0]] * 3), [math.inf, 2.0**10, 3.0])
    r = simulate(StaticScale(1.0), trace, runs=1, jitter=0.0)
    assert r.safe_scale[:, 0].tolist() == [2.0**15, 2.0**9, 2.0]
    # jitter multiplies the threshold's effect like every gradient: s * f >= overflow_scale
    factor = jitter_factors(3, 5, seed=2, jitter=1.0)
    r = simulate(StaticScale(2.0**9), trace, runs=5, seed=2, jitter=1.0)
    assert r.overflow[1].tolist() == (2.0**9 * factor[1] >= 2.0**10).tolist()
    assert r.overflow[1].any() and not r.overflow[1].all()


@pytest.mark.parametrize("jitter", [0.0, 0.6])
def test_simulate_many_and_scalar_agree_on_recorded_overflows(jitter):
    """One rule for the three entry points: a trace with recorded overflows, bad batches and
    absmax overflows, under every policy class (stacked ones too)."""
    base = make_trace("spikes", steps=300, seed=4, spike_prob=0.02)
    rng = np.random.default_rng(0)
    over = np.where(rng.random(300) < 0.05, np.exp2(rng.integers(2, 15, 300)), math.inf)
    bad = rng.random(300) < 0.02
    trace = _recorded(base, over, bad)
    assert np.isfinite(trace.overflow_scale).sum() > 5 and trace.nonfinite.sum() > 1
    many = simulate_many(POLICIES, trace, runs=3, seed=7, jitter=jitter)
    for policy, m in zip(POLICIES, many):
        alone = simulate(policy, trace, runs=3, seed=7, jitter=jitter)
        scale, overflow = simulate_scalar(policy, trace, runs=3, seed=7, jitter=jitter)
        assert np.array_equal(m.scale, alone.scale) and np.array_equal(m.scale, scale[:-1])
        assert np.array_equal(m.metrics["final_scale"], scale[-1])
        assert np.array_equal(m.overflow, alone.overflow) and np.array_equal(m.overflow, overflow)
        for key, value in alone.metrics.items():
            assert np.array_equal(m.metrics[key], value, equal_nan=True), key
    # the recorded thresholds mattered
    plain = simulate_many(POLICIES, _recorded(base, None, bad), runs=3, seed=7, jitter=jitter)
    assert any(not np.array_equal(a.overflow, b.overflow) for a, b in zip(many, plain))


def test_a_policy_name_replays_as_its_preset_and_a_class_is_explained():
    trace = make_trace("stationary", steps=40)
    by_name = simulate("deepspeed", trace, runs=2, seed=1)
    by_value = simulate(PRESETS["deepspeed"], trace, runs=2, seed=1)
    assert np.array_equal(by_name.scale, by_value.scale)
    with pytest.raises(TypeError, match=r"got the class DynamicScale: pass DynamicScale\(\)"):
        simulate(DynamicScale, trace)
