"""The many-runs replay holds per (step, run) only what its loop needs (issue 51): the jitter
factors, the scales and the overflow flags. Each step's gradient sizes and limits are worked out
for its row; the skipped steps, safe scales and flushed shares a block of runs at a time for the
metrics, and whole on first access. The results are the bits of the whole-array path
(tests/sim/replay/plain_reference.py) on the shipped traces, alone, stacked and pooled."""

import tracemalloc

import numpy as np
import pytest

from sim.replay.pool import pool_by_name, simulate_pooled
from sim.replay.result import DERIVED
from sim.replay.run import simulate, simulate_many
from sim.traces.families import make_trace
from sim.traces.named import named_trace
from sim.traces.real import MODELS
from tests.sim.replay.test_bit_identical import (  # noqa: F401 (small_blocks: a fixture)
    assert_same_bits,
    assert_same_result,
    plain_simulate,
    small_blocks,
)
from updater.policy import DynamicScale
from updater.policy.presets import PRESETS

POLICIES = [
    PRESETS["dynamic"],
    PRESETS["headroom"],
    DynamicScale(init_scale=5.0, max_scale=3.0 * 2**10, hysteresis=2),
]


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("runs", [1, 7])
def test_shipped_traces_give_the_whole_array_bits(model, runs):
    trace = named_trace(model)
    results = simulate_many(POLICIES, trace, runs=runs, seed=runs, jitter=0.5, progress=False)
    for policy, got in zip(POLICIES, results):
        assert_same_result(got, plain_simulate(policy, trace, runs, runs, 0.5))


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("runs", [5])
def test_pooled_recordings_give_the_whole_array_bits_of_each(runs):
    traces = [named_trace("digits_mlp"), named_trace("digits_mlp.order1")]
    pool = pool_by_name(traces)[0]
    results = simulate_pooled(POLICIES, pool, runs, seed=4, jitter=0.25)
    for policy, got in zip(POLICIES, results):
        parts = [
            plain_simulate(policy, t, len(range(i, runs, 2)), 4 + i, 0.25)
            for i, t in enumerate(traces)
        ]
        for name in ("scale", "overflow", *DERIVED):
            joined = np.concatenate([getattr(p, name) for p in parts], axis=1)
            assert_same_bits(getattr(got, name), joined)
        for name, values in got.metrics.items():
            assert_same_bits(values, np.concatenate([p.metrics[name] for p in parts]))


def test_a_result_works_out_each_derived_array_on_first_access_only():
    trace = make_trace("nan", steps=30, seed=2, nan_prob=0.2)
    result = simulate(PRESETS["dynamic"], trace, runs=50, seed=1, progress=False)
    held = {k for k, v in vars(result).items() if isinstance(v, np.ndarray)}
    assert held == {"scale", "overflow"}
    safe = result.safe_scale
    assert safe.shape == (30, 50) and set(DERIVED) & set(vars(result)) == {"safe_scale"}
    assert result.safe_scale is safe  # kept once worked out
    assert result.skipped[trace.nonfinite].all() and "flushed" not in vars(result)
    assert repr(result).endswith(f"skipped_per_run={result.skipped.sum(axis=0).mean():g})")


def _peak(steps: int, runs: int, policies) -> int:
    trace = make_trace("stationary", steps=steps, seed=0)
    tracemalloc.start()
    try:
        simulate_many(policies, trace, runs=runs, progress=False)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("policies", [1, 4])
def test_memory_per_step_and_run_is_the_jitter_and_each_policys_trajectories(policies):
    """The peak's growth per added run, at 10 and at 30 steps: its growth per step is what the
    replay holds per (step, run): 8 bytes of jitter and 8 + 1 per policy (scales, flags). The
    whole-array path held 39 and 117 bytes (its sizes, limits, skipped steps, safe scales and
    flushed shares besides)."""
    grid = [DynamicScale(growth_interval=g) for g in (10, 20, 40, 80)][:policies]
    slope = {
        steps: (_peak(steps, 200_000, grid) - _peak(steps, 100_000, grid)) / 100_000
        for steps in (10, 30)
    }
    per_step_and_run = (slope[30] - slope[10]) / 20
    assert per_step_and_run <= 8 + 9 * policies + 1, slope
