"""What a replayed flushed share rests on (issue 49, A): measured, exact beyond the measured
scales, only bounded, or not measured at all; on tiny traces made here."""

import dataclasses

import numpy as np
import pytest

from sim.replay.flush_basis import flush_basis
from sim.replay.run import simulate
from sim.traces.families import make_trace
from updater.policy import DynamicScale, NnablaLegacy, StaticScale
from updater.trace import Trace

OFFSETS = 2.0 ** np.array([-12, -8, -4, 0])  # an older recorder's flush scales, times its scale


def _recorded(steps=6, at=8.0, shares=(0.5, 0.375, 0.25, 0.1875), values=None):
    """A trace as a recording at scale ``at`` with flush probes by an older recorder (before it
    measured from the top of its bounds down) would hold: the measured shares at ``at`` times
    :data:`OFFSETS`, on every step."""
    values = [2.0**-20, 2.0**-10, 1.0] if values is None else values
    t = Trace.from_steps([values] * steps, name="m")
    scales = np.tile(at * OFFSETS, (steps, 1))
    return dataclasses.replace(t, flush_scales=scales, flush_shares=np.tile(shares, (steps, 1)))


def test_above_the_measured_scales_the_share_is_bounded_by_the_top_one():
    """Recorded at 8 (nnabla-legacy), replayed at 2**15: every applied step extrapolated; the
    bounds are 0 and the share measured at 8, and the point figure rests on it wholly."""
    trace = _recorded()
    row = simulate(DynamicScale(), trace, runs=4).summary()
    assert row["flush_basis"] == "measured"
    assert row["flush_unmeasured"] == 1.0 and row["flush_exact_beyond"] == 0.0
    assert row["signal_lost_low"] == 0.0
    assert row["signal_lost_high"] == pytest.approx(0.1875)
    assert row["signal_lost_low"] <= row["signal_lost"] <= row["signal_lost_high"]
    assert row["flush_unmeasured_lost"] == pytest.approx(row["signal_lost"])


def test_above_the_measured_scales_nothing_flushed_at_the_top_is_exact():
    trace = _recorded(shares=(0.25, 0.0, 0.0, 0.0))
    row = simulate(DynamicScale(), trace, runs=4).summary()
    assert row["flush_unmeasured"] == 0.0 and row["flush_exact_beyond"] == 1.0
    assert row["signal_lost_low"] == row["signal_lost"] == row["signal_lost_high"] == 0.0


def test_inside_the_measured_scales_nothing_is_extrapolated():
    """Recorded at 2**15 (the default), replayed under nnabla-legacy at 8 = 2**15 / 2**12."""
    trace = _recorded(at=2.0**15, shares=(0.3, 0.2, 0.1, 0.0))
    row = simulate(NnablaLegacy(), trace, runs=4, jitter=0.0).summary()
    assert row["flush_unmeasured"] == 0.0 and row["flush_exact_beyond"] == 0.0
    assert row["signal_lost_low"] == row["signal_lost"] == row["signal_lost_high"]
    assert row["signal_lost"] == pytest.approx(0.3)


def test_below_the_measured_scales_the_share_is_at_least_the_lowest_one():
    trace = _recorded(at=2.0**15, shares=(0.3, 0.2, 0.1, 0.0))
    row = simulate(StaticScale(scale=2.0**-2), trace, runs=2).summary()
    assert row["flush_unmeasured"] == 1.0
    assert row["signal_lost_low"] == pytest.approx(0.3) and row["signal_lost_high"] == 1.0


def test_a_trace_without_flush_measurement_measured_none():
    """A GradientRecorder trace without Probes(flush=True): no bare 0%; the bounds are the
    skipped steps' share and everything."""
    trace = Trace.from_steps([[1.0, 2.0**-10]] * 3 + [[1e3, 1.0]], name="m")
    row = simulate(DynamicScale(), trace, runs=2, jitter=0.0).summary()
    assert row["flush_basis"] == "none" and row["flush_unmeasured"] == 1.0
    assert row["skipped"] == 1
    assert row["signal_lost_low"] == pytest.approx(1 / 4) and row["signal_lost_high"] == 1.0


def test_a_synthetic_family_is_exact_by_construction_but_not_once_saved(tmp_path):
    trace = make_trace("stationary", steps=50)
    row = simulate(DynamicScale(), trace, runs=2).summary()
    assert row["flush_basis"] == "model" and row["flush_unmeasured"] == 0.0
    assert row["signal_lost_low"] == row["signal_lost"] == row["signal_lost_high"]
    loaded = Trace.load(trace.save(tmp_path / "s.npz"))  # the file cannot say how it was made
    assert flush_basis(loaded).kind == "none"


def test_a_step_not_measured_takes_the_scales_both_neighbours_measured():
    """Probes(flush_every=k): steps 1-2 lie between steps 0 (measured at 1 to 8) and 3 (at 4 to
    32), so their range is 4 to 8; step 4, after the last measured one, takes step 3's."""
    scales = np.full((5, 2), np.nan)
    shares = np.full((5, 2), np.nan)
    scales[0], shares[0] = (1.0, 8.0), (0.2, 0.1)
    scales[3], shares[3] = (4.0, 32.0), (0.15, 0.05)
    t = Trace.from_steps([[1.0]] * 5)
    basis = flush_basis(dataclasses.replace(t, flush_scales=scales, flush_shares=shares))
    assert basis.lo.tolist() == [1.0, 4.0, 4.0, 4.0, 4.0]
    assert basis.hi.tolist() == [8.0, 8.0, 8.0, 32.0, 32.0]
    assert basis.f_hi.tolist() == [0.1, 0.1, 0.1, 0.05, 0.05]
    assert basis.scales == (1.0, 32.0)


def test_a_probe_that_overflowed_measured_nothing_at_its_scale():
    """A NaN share (the probe overflowed) does not widen the range."""
    trace = _recorded(at=8.0, shares=(0.5, 0.375, 0.25, np.nan))
    basis = flush_basis(trace)
    assert basis.hi[0] == 0.5 and basis.f_hi[0] == 0.25


def test_on_the_binade_model_the_bounds_are_signal_lost_itself_read_only():
    """A family's flush metrics are worked out once from signal_lost (issue 51): the bounds are
    read-only views of it (writing one raises instead of changing the others), the counts 0."""
    r = simulate(DynamicScale(), make_trace("spikes", steps=30, seed=1), runs=9, progress=False)
    lost = r.metrics["signal_lost"]
    for name in ("signal_lost_low", "signal_lost_high"):
        bound = r.metrics[name]
        assert np.shares_memory(bound, lost) and np.array_equal(bound, lost)
        with pytest.raises(ValueError, match="read-only"):
            bound[0] = 0.5
    for name in ("flush_unmeasured", "flush_exact_beyond", "flush_unmeasured_lost"):
        assert not r.metrics[name].any()
    assert r.summary()["flush_basis"] == "model"
