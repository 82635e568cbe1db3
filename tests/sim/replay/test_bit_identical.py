"""The replay made cheaper (issue 42: in-place passes, the runs a block at a time, a
(steps, runs) C-ordered jitter) gives the bits of the plain formulas it replaced
(tests/sim/replay/plain_reference.py): every array, its dtype, every metric, NaN where NaN."""

import dataclasses

import numpy as np
import pytest

import sim.replay.result as result_module
from sim.casting.underflow import flushed_share_of_table, flushed_table, pooled_flushed_share
from sim.replay.metrics import run_metrics
from sim.replay.result import run_blocks, safe_scales
from sim.replay.run import jitter_factors, simulate, simulate_many
from sim.traces.families import make_trace
from sim.traces.named import named_trace
from tests.sim.replay import plain_reference as plain
from updater.policy import DynamicScale, HeadroomScale
from updater.policy.presets import PRESETS


def assert_same_bits(got, expected):
    assert type(got) is type(expected)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few runs, so that small tests cross block edges."""
    monkeypatch.setattr(result_module, "RUN_BLOCK", 16)
    monkeypatch.setattr(result_module, "MIN_BLOCK_RUNS", 3)


def edge_scales(n: int) -> np.ndarray:
    """``n`` scales: 0, inf, subnormals, powers of two and their neighbours, huge and random."""
    powers = np.ldexp(1.0, np.arange(-1074, 1024, 7))
    fixed = [0.0, np.inf, 5e-324, 2.0**-1022, 2.0**-25, 3.0, 65504.0, np.finfo(float).max]
    pool = np.concatenate([fixed, powers, np.nextafter(powers, 0), np.nextafter(powers, np.inf)])
    rng = np.random.default_rng(1)
    return np.concatenate([pool, np.exp2(rng.uniform(-80, 80, n))])[:n]


@pytest.mark.parametrize("steps, runs", [(10, 41), (3, 7), (1, 2), (200, 3), (5, 1)])
@pytest.mark.parametrize("jitter", [0.25, 3.0, 8.0, 1])
def test_jitter_factors_are_the_plain_ones(steps, runs, jitter, small_blocks):
    assert_same_bits(
        jitter_factors(steps, runs, 7, jitter), plain.jitter_factors(steps, runs, 7, jitter)
    )


def test_jitter_factors_across_default_blocks():
    runs = 2 * result_module.MIN_BLOCK_RUNS + 1  # two blocks, the second one run wider
    assert_same_bits(jitter_factors(3, runs, 2, 0.5), plain.jitter_factors(3, runs, 2, 0.5))
    assert_same_bits(jitter_factors(4, 5, 0, 0.0), plain.jitter_factors(4, 5, 0, 0.0))


def test_flushed_share_of_table_is_the_plain_one():
    table = flushed_table(make_trace("spikes", steps=40, seed=3))
    scales = edge_scales(40 * 90).reshape(40, 90)
    for scale in (scales, scales[:, ::3], scales[:, :1], scales[:, 0], scales[0, :40], 3.0, 0.0):
        assert_same_bits(
            flushed_share_of_table(table, scale), plain.flushed_share_of_table(table, scale)
        )
    pooled = table[-1:]  # one row, the shape pooled_flushed_share uses
    flat = edge_scales(500)
    assert_same_bits(
        flushed_share_of_table(pooled, flat), plain.flushed_share_of_table(pooled, flat)
    )
    assert pooled_flushed_share(make_trace("spikes", steps=5), [1.0, 8.0]).shape == (2,)


def test_safe_scales_are_the_plain_ones():
    rng = np.random.default_rng(2)
    absmax = np.exp2(rng.uniform(-60, 60, (30, 8)))
    absmax[0, :4] = [0.0, np.inf, np.nan, 5e-324]
    over = np.exp2(rng.uniform(-10, 40, (30, 8)))
    over[1] = np.inf
    floor = np.where(rng.random((30, 1)) < 0.5, 0.0, 2.0**20)
    cases = [
        (absmax, None, None, None),
        (absmax, over, 2.0**24, floor),
        (absmax[:, :1], over, None, floor),  # broadcast: the result is wider than absmax
        (absmax[:, 0], None, 3.0 * 2**10, None),
        (1.5e-3, over[:, 0], 2.0**15, 8.0),
        (absmax, None, np.full(8, 2.0**12), None),
    ]
    for args in cases:
        assert_same_bits(np.asarray(safe_scales(*args)), np.asarray(plain.safe_scales(*args)))


def test_run_metrics_are_the_plain_ones():
    rng = np.random.default_rng(3)
    steps, runs = 12, 50
    scale = np.exp2(rng.integers(-2, 30, (steps, runs))).astype(np.float64)
    safe = np.exp2(rng.integers(0, 28, (steps, runs))).astype(np.float64)
    safe[0, :3] = [0.0, np.inf, np.nan]
    scale[1, :2] = [0.0, np.inf]
    overflow = rng.random((steps, runs)) < 0.3
    skipped = overflow.copy()
    skipped[:, 0] = True  # a run with every step skipped: its mean flushed share is NaN
    flushed = rng.random((steps, runs))
    for nonfinite in (np.zeros(steps, bool), rng.random(steps) < 0.3, np.ones(steps, bool)):
        skipped_now = skipped | nonfinite[:, None]
        for cols in (slice(None), slice(0, 1), slice(5, 40, 3)):
            args = (scale[:, cols], overflow[:, cols], skipped_now[:, cols], safe[:, cols])
            got = run_metrics(*args, flushed[:, cols], nonfinite)
            expected = plain.run_metrics(*args, flushed[:, cols], nonfinite)
            assert got.keys() == expected.keys()
            for name in got:
                assert_same_bits(got[name], expected[name])


TRACES = {
    "stationary": lambda: make_trace("stationary", steps=30, seed=1),
    "nan": lambda: make_trace("nan", steps=60, seed=2, nan_prob=0.2),
    "recorded": lambda: named_trace("digits_conv_bn").take(np.arange(60)),  # thresholds, flush
    "unmeasured": lambda: dataclasses.replace(TRACES["recorded"](), flush=None),  # kind "none"
}
POLICIES = [
    PRESETS["dynamic"],
    PRESETS["headroom"],
    HeadroomScale(margin=3.0),
    DynamicScale(init_scale=5.0, max_scale=3.0 * 2**10),
]


def plain_simulate(policy, trace, runs, seed, jitter):
    factor = plain.jitter_factors(trace.steps, runs, seed, jitter)
    absmax = trace.absmax[:, None] * factor
    limits = plain.step_limits(trace, factor)
    scale, overflow = plain.advance(policy, trace, absmax, limits, runs)
    return plain.run_result(policy, trace, absmax, factor, scale, overflow, None)


def assert_same_result(got, expected):
    for name in ("scale", "overflow", "skipped", "safe_scale", "flushed"):
        assert_same_bits(getattr(got, name), getattr(expected, name))
    assert got.metrics.keys() == expected.metrics.keys()
    for name in got.metrics:
        assert_same_bits(got.metrics[name], expected.metrics[name])
    assert repr(got.summary()) == repr(expected.summary())  # NaN where NaN


@pytest.mark.parametrize("trace", list(TRACES))
@pytest.mark.parametrize("jitter", [0.0, 0.5, 2.0])
def test_simulate_gives_the_plain_result_across_blocks(trace, jitter, small_blocks):
    trace = TRACES[trace]()
    for i, policy in enumerate(POLICIES):
        got = simulate(policy, trace, runs=23, seed=i, jitter=jitter, progress=False)
        assert_same_result(got, plain_simulate(policy, trace, 23, i, jitter))


@pytest.mark.parametrize("trace", list(TRACES))
def test_simulate_many_gives_each_policy_its_plain_result(trace, small_blocks):
    trace = TRACES[trace]()
    results = simulate_many(POLICIES, trace, runs=11, seed=5, jitter=0.5, progress=False)
    for policy, got in zip(POLICIES, results):
        assert_same_result(got, plain_simulate(policy, trace, 11, 5, 0.5))


@pytest.mark.parametrize("steps", [1, 10, 1000, 10**6])
@pytest.mark.parametrize("runs", [1, 2, 3, 16383, 16384, 16385, 40000, 1000001])
def test_run_blocks_cover_the_runs_and_never_leave_one_run_alone(steps, runs):
    blocks = run_blocks(steps, runs)
    assert blocks[0].start == 0 and blocks[-1].stop == runs
    assert all(a.stop == b.start for a, b in zip(blocks, blocks[1:]))
    widths = [b.stop - b.start for b in blocks]
    assert min(widths) >= min(runs, result_module.MIN_BLOCK_RUNS)
    assert len(blocks) == 1 or max(widths) * steps <= 2 * max(
        result_module.RUN_BLOCK, result_module.MIN_BLOCK_RUNS * steps
    )
