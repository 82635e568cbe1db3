"""The commands' predictive interval (issue 49, part 2): block bootstrap within the recordings
times a calibrated factor; usable from one recording, never zero-wide on ties."""

import math

import numpy as np
import pytest

from sim.replay.bootstrap import RESAMPLES, block_indices, bootstrap_metrics
from sim.replay.intervals import replay_intervals
from sim.replay.pool import TracePool
from sim.replay.run import simulate
from sim.replay.spread import CALIBRATED, LEVEL, calibrated_interval, calibration_factor
from updater.policy import StaticScale
from updater.trace import Trace

STEPS = 200
P = 0.1
"""Each step of the synthetic model overflows at 2**15 with probability P, independently: a
batch order's skipped steps under StaticScale(2**15) are Binomial(STEPS, P)."""


def _recording(seed: int, overflowing=None) -> Trace:
    """A recording of the synthetic model in batch order ``seed`` (or with the steps
    ``overflowing`` at 2**15 given)."""
    rng = np.random.default_rng(seed)
    if overflowing is None:
        overflowing = np.flatnonzero(rng.random(STEPS) < P)
    rows = [rng.uniform(2.0**-12, 2.0**-4, 20) for _ in range(STEPS)]
    over = np.full(STEPS, np.inf)
    over[overflowing] = 2.0**15
    trace = Trace.from_steps(rows, name="m")
    trace.overflow_scale = over
    return trace


def test_blocks_keep_their_place_in_training_and_their_order():
    rng = np.random.default_rng(3)
    for _ in range(20):
        idx = block_indices(400, 3, rng)
        step, which = idx % 400, idx // 400
        assert idx.shape == (400,) and set(which) <= {0, 1, 2}
        block = 20  # 5% of 400
        for place in range(0, 400, block):  # each block is a run of consecutive steps ...
            run = step[place : place + block]
            assert np.array_equal(np.diff(run), np.ones(block - 1))
            assert abs(int(run[0]) - place) <= block  # ... from within one block of its place
            assert len(set(which[place : place + block])) == 1  # ... of one recording
    with pytest.raises(ValueError, match="steps must be"):
        block_indices(0, 1, rng)


def test_known_binomial_variation_one_recording_covers_and_is_not_too_wide():
    """With independent steps the within-recording variation is all there is, so factor 1
    should hold about LEVEL of new batch orders, with a width near the true 90% range."""
    policy = StaticScale(scale=2.0**15)
    true_sd = math.sqrt(STEPS * P * (1 - P))
    held, widths = 0, []
    for seed in range(24):
        rec, new = _recording(seed), _recording(1000 + seed)
        value = simulate(policy, rec, jitter=0.0).metrics["skipped"][0]
        drawn = bootstrap_metrics(policy, [rec], ["skipped"], seed)["skipped"]
        low, high = calibrated_interval([value], drawn, 1.0, 1.0, STEPS)
        target = simulate(policy, new, jitter=0.0).metrics["skipped"][0]
        held += low <= target <= high
        widths.append(high - low)
    assert held >= 20  # 0.9 * 24 = 21.6 expected; binomial 5% tail at 19
    # the exact interval for a new draw (sd * sqrt(2) about a known centre) is 2 * 1.645 *
    # sqrt(2) * true_sd = 19.7 wide; the bootstrap's must be near it, never the whole range
    assert 0.6 * 19.7 <= np.mean(widths) <= 1.5 * 19.7
    assert 2 * 1.645 * math.sqrt(2) * true_sd == pytest.approx(19.7, abs=0.1)


def test_two_recordings_that_tie_keep_a_width():
    a = _recording(1, overflowing=np.arange(5, 200, 13))
    b = _recording(2, overflowing=np.arange(9, 200, 13))  # other steps, the same count
    policy = StaticScale(scale=2.0**15)
    iv = replay_intervals(policy, TracePool([a, b]))["skipped"]
    assert iv["each"] == [15.0, 15.0] and iv["recordings"] == 2
    assert iv["low"] < 15 < iv["high"] and iv["high"] - iv["low"] >= 4
    assert iv["low"] == int(iv["low"]) and iv["high"] == int(iv["high"])  # whole steps


def test_one_recording_gives_a_level_and_holds_its_own_replay():
    policy = StaticScale(scale=2.0**15)
    out = replay_intervals(policy, _recording(5))
    for metric, iv in out.items():
        assert iv["level"] == CALIBRATED[metric][1] and iv["recordings"] == 1
        assert iv["low"] <= iv["each"][0] <= iv["high"]
    assert out["skipped"]["high"] - out["skipped"]["low"] > 0


def test_a_policy_that_never_overflows_gets_zero_width():
    iv = replay_intervals(StaticScale(scale=2.0**10), _recording(6))["skipped"]
    assert (iv["low"], iv["high"], iv["each"]) == (0.0, 0.0, [0.0])


def test_bootstrap_gives_resamples_of_the_policy_metric():
    drawn = bootstrap_metrics(StaticScale(scale=2.0**15), [_recording(7)], ["skipped"])
    assert drawn["skipped"].shape == (RESAMPLES,) and np.all(drawn["skipped"] >= 0)
    assert np.std(drawn["skipped"]) > 0


def test_calibration_factor_is_the_level_quantile_and_says_what_it_cannot_hold():
    z = 1.6448536269514722 * math.sqrt(2)
    drawn = [9.0, 11.0] * 4  # sd = 1.069
    sd = float(np.std(drawn, ddof=1))
    cases = [
        {"value": 10.0, "drawn": drawn, "target": 10.0 + k * z * sd, "unit": 1.0}
        for k in range(1, 21)
    ]
    factor, level = calibration_factor(cases)  # the ceil(0.9 * 21) = 19th of 1..20
    assert (factor, level) == (pytest.approx(19.0), LEVEL)
    flat = {"value": 0.0, "drawn": [0.0] * 8, "target": 3.0, "unit": 1.0}  # no variation seen
    factor, level = calibration_factor(cases[:15] + [flat] * 5)
    assert (factor, level) == (pytest.approx(15.0), 0.75)
    with pytest.raises(ValueError, match="at least one case"):
        calibration_factor([])


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="values needs at least 1 and drawn at least 2"):
        calibrated_interval([], [1.0, 2.0], 1.0, 1.0, 10.0)
    with pytest.raises(ValueError, match="factor must be >= 0 and unit > 0"):
        calibrated_interval([1.0], [1.0, 2.0], -1.0, 1.0, 10.0)
    with pytest.raises(ValueError, match="metrics must be among"):
        replay_intervals(StaticScale(), _recording(8), metrics=["mean_flushed"])
