"""Censored and bracketed overflow thresholds in the trace format and the replay (issue 32,
item 1): a probed step finite at the highest probed scale is stored as "above S" and never
overflows at or below S; a probed threshold replays the same at any small jitter as exactly."""

import numpy as np
import pytest

from sim.replay.run import simulate, simulate_many, simulate_scalar
from tests.paths import SHIPPED_TRACES
from updater.policy import HeadroomScale, StaticScale
from updater.policy.presets import PRESETS
from updater.trace import EXP_MAX, EXP_MIN, NBINS, Trace

TOP = 2.0**15


def _trace(absmax, overflow_scale, finite_scale, probed=True) -> Trace:
    steps = len(absmax)
    counts = np.zeros((steps, NBINS), np.int64)
    counts[:, 0] = 1
    return Trace(
        counts,
        np.zeros(steps),
        absmax,
        np.zeros(steps, bool),
        "t",
        overflow_scale,
        overflow_probed=probed,
        finite_scale=finite_scale,
    )


def test_a_censored_step_never_overflows_at_or_below_its_scale_with_any_jitter():
    # finite at 2**15 with a gradient 0.92 of the way to float16's edge: jitter above 1.09
    # would push it over by size alone; the probes saw it finite there, so it never overflows
    t = _trace(np.full(50, 60000 / TOP), np.full(50, np.inf), np.full(50, TOP))
    for scale in (TOP, TOP / 2):
        for jitter in (0.0, 0.25, 1.0):
            r = simulate(StaticScale(scale), t, runs=64, jitter=jitter)
            assert not r.overflow.any(), (scale, jitter)
            assert (r.safe_scale >= scale).all()
        scales, overflow = simulate_scalar(StaticScale(scale), t, runs=4, jitter=1.0)
        assert not overflow.any()
    above = simulate(StaticScale(2 * TOP), t, runs=64, jitter=0.25)
    assert above.overflow.all()  # above S the gradient-size rule decides: 1.83 * 65504


def test_an_unknown_finite_scale_leaves_the_gradient_size_rule_alone():
    t = _trace(np.full(50, 60000 / TOP), np.full(50, np.inf), np.zeros(50))
    r = simulate(StaticScale(TOP), t, runs=64, jitter=1.0)
    assert 0.2 < r.overflow.mean() < 0.8


@pytest.mark.parametrize("jitter", [0.001, 0.01, 0.05])
def test_probed_thresholds_replay_as_exactly_at_small_jitter(jitter):
    # HeadroomScale rests at 2**15, where every other step overflows (probed: finite at 2**14)
    steps = 200
    over = np.where(np.arange(steps) % 2 == 0, TOP, np.inf)
    t = _trace(np.full(steps, 1e-3), over, np.where(np.isinf(over), TOP, TOP / 2))
    policies = [HeadroomScale(), PRESETS["dynamic"], StaticScale(TOP / 2)]
    exact = [r.skipped.sum(axis=0) for r in simulate_many(policies, t, runs=1, jitter=0)]
    assert exact[0][0] > 90  # a real test: the rested policy skips every other step
    for e, r in zip(exact, simulate_many(policies, t, runs=100, jitter=jitter)):
        assert (r.skipped.sum(axis=0) == e[0]).all(), r.label


def test_the_shipped_conv_bn_trace_converges_to_its_exact_replay():
    t = Trace.load(SHIPPED_TRACES / "digits_conv_bn.npz")  # format 5: censored steps marked
    assert t.overflow_probed and (t.finite_scale[np.isinf(t.overflow_scale)] == 2.0**15).all()
    policy = HeadroomScale()
    exact = simulate(policy, t, runs=1, jitter=0).skipped.sum()
    for jitter in (0.001, 0.01):
        skipped = simulate(policy, t, runs=50, jitter=jitter).skipped.sum(axis=0)
        assert (skipped == exact).all()
    wide = simulate(policy, t, runs=50, jitter=0.25).skipped.sum(axis=0).mean()
    assert abs(wide - exact) < 0.05 * exact  # 221.6 against 224 (160.5 before)


def test_finite_scale_round_trips_and_a_version_4_file_loads_without_it(tmp_path):
    t = _trace(np.ones(3), [np.inf, 8.0, np.inf], [TOP, 4.0, 0.0])
    back = Trace.load(t.save(tmp_path / "t.npz"))
    np.testing.assert_array_equal(back.finite_scale, [TOP, 4.0, 0.0])
    old = {
        "format_version": 4,
        "exp_min": EXP_MIN,
        "exp_max": EXP_MAX,
        "counts": t.counts,
        "zeros": t.zeros,
        "absmax": t.absmax,
        "nonfinite": t.nonfinite,
        "overflow_scale": t.overflow_scale,
        "overflow_probed": True,
        "name": "v4",
    }
    np.savez(tmp_path / "v4.npz", **old)
    v4 = Trace.load(tmp_path / "v4.npz")
    assert v4.overflow_probed and v4.name == "v4"
    np.testing.assert_array_equal(v4.finite_scale, np.zeros(3))
    np.testing.assert_array_equal(v4.overflow_scale, t.overflow_scale)


def test_finite_scale_is_checked():
    with pytest.raises(ValueError, match="finite_scale must hold numbers >= 0 .* at step 1"):
        _trace(np.ones(2), [np.inf, 8.0], [0.0, 8.0])
    with pytest.raises(ValueError, match="finite_scale must hold"):
        _trace(np.ones(2), [np.inf, 8.0], [np.nan, 0.0])
    with pytest.raises(ValueError, match=r"finite_scale must have shape \(2,\)"):
        _trace(np.ones(2), [np.inf, 8.0], [0.0])
