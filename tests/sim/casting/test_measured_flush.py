"""The simulator replays measured flushed shares (sim/casting/underflow.py measured_flushed_share)
where a trace holds them; on unmeasured steps the binade model shifted by the measured steps'
correction (issue 39: flushing measured on a sample of steps)."""

import numpy as np
import pytest

from sim.casting.underflow import flushed_share, measured_flushed_share, replay_flushed_share
from sim.replay.run import simulate
from updater.policy import StaticScale
from updater.trace import Trace


def _trace(scales, shares):
    """Three steps of values 2**-30, 2**-20, 1 (the binade model flushes 2**-30 below 2**5);
    measurements on the steps whose row is not all NaN."""
    t = Trace.from_steps([[2.0**-30, 2.0**-20, 1.0]] * 3)
    return Trace(t.counts, t.zeros, t.absmax, t.nonfinite, flush_scales=scales, flush_shares=shares)


NAN = np.nan
TRACE = _trace(
    [[1.0, 16.0], [1.0, 16.0], [NAN, NAN]],
    [[0.5, 0.25], [NAN, 0.2], [NAN, NAN]],
)


def test_measured_points_are_replayed_exactly_and_interpolated_in_log2_between():
    got = measured_flushed_share(TRACE, np.array([[1.0, 4.0, 16.0]] * 3))
    assert got[0].tolist() == [0.5, 0.375, 0.25]  # 4 is half-way between 1 and 16 in log2
    assert got[1].tolist() == [0.2, 0.2, 0.2]  # one point: its value around it


def test_outside_the_measured_scales_the_model_is_shifted_by_the_edge_difference():
    model = flushed_share(TRACE, np.array([[2.0**-4, 2.0**10]] * 3))
    got = measured_flushed_share(TRACE, np.array([[2.0**-4, 2.0**10]] * 3))
    edge = flushed_share(TRACE, np.array([[1.0, 16.0]] * 3))
    assert got[0, 0] == pytest.approx(model[0, 0] + 0.5 - edge[0, 0])
    assert got[0, 1] == max(0.0, model[0, 1] + 0.25 - edge[0, 1])
    # no measurement after the last measured step: its model plus step 1's correction (steps of
    # one histogram: step 1's share)
    assert got[2].tolist() == pytest.approx(got[1].tolist())
    assert ((got >= 0) & (got <= 1)).all()


def test_a_trace_without_measurements_replays_the_binade_model():
    t = Trace.from_steps([[2.0**-30, 2.0**-20, 1.0]] * 3)
    scale = np.array([[1.0, 64.0]] * 3)
    assert replay_flushed_share(t, scale).tolist() == flushed_share(t, scale).tolist()


def test_the_engine_replays_the_measured_share():
    """A static scale at a measured point gives the measured share on each measured step (and
    the last measured step's correction after it)."""
    result = simulate(StaticScale(16.0), TRACE, runs=2, jitter=0.0)
    assert result.flushed[:, 0].tolist() == pytest.approx([0.25, 0.2, 0.2])
    assert flushed_share(TRACE, 16.0)[2] != 0.2  # the binade model alone would differ
