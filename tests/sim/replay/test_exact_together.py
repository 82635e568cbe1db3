"""The predictive interval's exact replays advanced together (sim/replay/exact.py) give what
replaying each recording alone gave, bit for bit: every metric of every run, and the intervals
the commands print, on the shipped recordings and on a synthetic one that holds every case of
the step rule (bad batches, floors, censored and unknown steps, probed and seen thresholds,
a recording every two steps)."""

import dataclasses

import numpy as np
import pytest

from sim.replay.bootstrap import RESAMPLES, block_indices, bootstrap_draws, bootstrap_metrics
from sim.replay.clock import training_clock
from sim.replay.exact import exact_metrics
from sim.replay.intervals import INTERVAL_METRICS, metric_interval, replay_intervals
from sim.replay.metrics import METRICS
from sim.replay.pool import TracePool
from sim.replay.run import simulate
from sim.traces.named import named_trace
from updater.policy import DynamicScale, HeadroomScale, NnablaLegacy, StaticScale
from updater.policy.presets import PRESETS
from updater.trace import Trace
from updater.trace.parts import concat_traces

POLICIES = [
    *PRESETS.values(),
    DynamicScale(growth_interval=7, hysteresis=2),
    DynamicScale(growth_interval=5, hysteresis=3, consecutive_hysteresis=True),
    HeadroomScale(margin=4.0),
    NnablaLegacy(scale=2.0**14, N=6),
    StaticScale(scale=2.0**13),
]


def _synthetic(seed: int, probed: bool, steps: int = 150, every: int = 1) -> Trace:
    """A recording holding every case the step rule reads: large steps that overflow by their
    size, bad batches, recorded thresholds (probed or seen), floors below them, censored steps
    (finite up to a scale, nothing above) and steps with nothing recorded."""
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, 4, steps)  # 0: nothing known, 1: threshold, 2: + floor, 3: censored
    top = np.where(kind == 3, 2.0 ** rng.integers(2, 7, steps), 2.0 ** rng.integers(-8, 2, steps))
    rows = [rng.uniform(2.0**-14, top[t], 16) for t in range(steps)]  # censored: large, the
    for t in np.flatnonzero(rng.random(steps) < 0.06):  # floor keeps them finite up to it
        rows[t][3] = np.nan  # a bad batch
    trace = Trace.from_steps(rows, name="synthetic")
    over = np.where((kind == 1) | (kind == 2), 2.0 ** rng.integers(8, 16, steps), np.inf)
    floor = np.where(kind == 2, over / 2.0 ** rng.integers(1, 4, steps), 0.0)
    floor = np.where(kind == 3, 2.0 ** rng.integers(6, 15, steps), floor)
    trace = dataclasses.replace(trace, overflow_scale=over, finite_scale=floor)
    trace.overflow_probed = probed
    return dataclasses.replace(trace, every=every)


def _one_by_one_bootstrap(policy, recordings, metrics, seed=0):
    """The bootstrap as it was: each drawn recording replayed alone by ``simulate``."""
    lean = [
        dataclasses.replace(training_clock(t), layers=None, flush=None, forward=None)
        for t in recordings
    ]
    joined = concat_traces(lean, lean[0].name)
    rng = np.random.default_rng(seed)
    out = {m: np.empty(RESAMPLES) for m in metrics}
    for k in range(RESAMPLES):
        drawn = joined.take(block_indices(lean[0].steps, len(lean), rng))
        result = simulate(policy, drawn, runs=1, jitter=0.0, progress=False).metrics
        for m in metrics:
            out[m][k] = float(result[m][0])
    return out


def _one_by_one_intervals(policy, trace, seed=0):
    """:func:`replay_intervals` as it was: each recording and each draw replayed alone."""
    recordings = trace.traces if isinstance(trace, TracePool) else [trace]
    exact = [simulate(policy, t, runs=1, jitter=0.0, progress=False).metrics for t in recordings]
    drawn = _one_by_one_bootstrap(policy, recordings, INTERVAL_METRICS, seed)
    steps = training_clock(recordings[0]).steps
    return {
        metric: metric_interval(metric, [float(m[metric][0]) for m in exact], drawn[metric], steps)
        for metric in INTERVAL_METRICS
    }


def test_every_metric_of_every_run_equals_its_recording_replayed_alone():
    a, b = (training_clock(_synthetic(s, probed=s == 1, every=2)) for s in (1, 2))
    joined = concat_traces([a, b], "synthetic")  # mixed: joined is not probed, a is
    rng = np.random.default_rng(5)
    draws = [block_indices(a.steps, 2, rng) for _ in range(6)]
    sources = [(a, None), (b, None), *((joined, d) for d in draws)]
    own = [a, b, *(joined.take(d) for d in draws)]
    assert any(t.nonfinite.any() for t in own) and a.overflow_probed != joined.overflow_probed
    bad = np.stack([t.nonfinite for t in own], axis=1)
    assert (bad.any(axis=1) & ~bad.all(axis=1)).any()  # a step bad in some runs only
    for policy in POLICIES:
        alone = [simulate(policy, t, runs=1, jitter=0.0, progress=False).metrics for t in own]
        names = sorted(alone[0])  # every per-run metric, those of the flushing included
        assert set(METRICS) & set(names) >= set(INTERVAL_METRICS) and len(names) > 10
        got = exact_metrics(policy, sources, names)
        for m in names:
            expected = [float(each[m][0]) for each in alone]
            np.testing.assert_array_equal(got[m], expected, err_msg=f"{policy!r} {m}")
        skipped = got["skipped"]
        if not isinstance(policy, StaticScale):
            assert skipped.min() < skipped.max(), policy  # the runs really differ


def _shipped():
    one = named_trace("digits_conv_bn")
    pool = TracePool([one, named_trace("digits_conv_bn.order1")])
    return {"digits_conv_bn": one, "digits_conv_bn x2": pool, "attention": "sequence_attention"}


@pytest.mark.parametrize("name", ["digits_conv_bn", "digits_conv_bn x2", "attention"])
@pytest.mark.parametrize("policy", [PRESETS["dynamic"], PRESETS["headroom"]], ids=repr)
def test_the_printed_intervals_on_shipped_recordings_are_those_of_one_by_one(name, policy):
    trace = _shipped()[name]
    trace = named_trace(trace) if isinstance(trace, str) else trace
    assert replay_intervals(policy, trace, seed=3) == _one_by_one_intervals(policy, trace, 3)


@pytest.mark.parametrize("policy", POLICIES, ids=repr)
def test_the_intervals_on_a_synthetic_pool_are_those_of_one_by_one(policy):
    pool = TracePool([_synthetic(s, probed=s == 3, every=2) for s in (3, 4)])
    assert replay_intervals(policy, pool) == _one_by_one_intervals(policy, pool)
    one = _synthetic(6, probed=True)
    assert replay_intervals(policy, one, seed=1) == _one_by_one_intervals(policy, one, 1)
    got = bootstrap_metrics(policy, pool.traces, INTERVAL_METRICS, seed=2)
    expected = _one_by_one_bootstrap(policy, pool.traces, INTERVAL_METRICS, seed=2)
    for m in INTERVAL_METRICS:
        np.testing.assert_array_equal(got[m], expected[m])


def test_sources_of_other_lengths_or_none_are_refused():
    joined, draws = bootstrap_draws([_synthetic(1, True)])
    with pytest.raises(ValueError, match="one number of steps"):
        exact_metrics("dynamic", [(joined, draws[0]), (joined, draws[1][:-1])], ["skipped"])
    with pytest.raises(ValueError, match="at least one"):
        exact_metrics("dynamic", [], ["skipped"])
    with pytest.raises(ValueError, match="one step count"):
        bootstrap_draws([_synthetic(1, True), _synthetic(2, True, steps=90)])
