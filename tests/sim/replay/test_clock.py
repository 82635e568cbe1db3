"""A trace recorded every N steps replays on the training clock (sim.replay.clock, issue 39)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sim.replay.clock import training_clock
from sim.replay.pool import TracePool
from sim.replay.run import simulate, simulate_many
from sim.traces.families import lognormal_trace
from updater.policy import DynamicScale
from updater.trace import Trace
from updater.trace.recorder import GradientRecorder

GROWING = DynamicScale(init_scale=1.0, growth_interval=5, max_scale=2.0**15)


def _record(path, every: int, steps: int) -> Trace:
    """``steps`` update() calls of a fresh tiny model (cpu:half), recorded every ``every``."""
    nn = pytest.importorskip("nnabla")
    from tests.nnabla_models import TinyClassifier
    from updater import DynamicLossScalingUpdater

    nn.clear_parameters()
    m = TinyClassifier("clock")
    with GradientRecorder(path, every=every) as rec:
        u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), recorder=rec)
        for _ in range(steps):
            u.update()
    nn.clear_parameters()
    return Trace.load(path)


@pytest.mark.nnabla
def test_a_trace_recorded_every_10_steps_replays_on_a_10x_clock(tmp_path):
    """The same run recorded every step and every 10th: the replays' scales agree step for
    step (the policy grows every 5 training steps; on the recorded steps' clock the every-10
    trace would grow 8 times too slowly)."""
    each = _record(tmp_path / "each.npz", 1, 40)
    tenth = _record(tmp_path / "tenth.npz", 10, 40)
    assert (each.steps, each.every) == (40, 1) and (tenth.steps, tenth.every) == (4, 10)
    assert tenth.training_steps == 40
    np.testing.assert_array_equal(tenth.absmax, each.absmax[::10])  # the same run
    a = simulate(GROWING, each, runs=1, jitter=0.0)
    b = simulate(GROWING, tenth, runs=1, jitter=0.0)
    assert b.scale.shape == a.scale.shape == (40, 1)
    np.testing.assert_array_equal(b.scale, a.scale)
    assert a.scale[-1, 0] == 2.0**7 and a.metrics["skipped"][0] == 0
    (many,) = simulate_many([GROWING], tenth, runs=2, jitter=0.0)  # what dls tune/sweep run
    np.testing.assert_array_equal(many.scale[:, 0], a.scale[:, 0])


def test_every_round_trips_and_older_files_load_with_1(tmp_path):
    t = dataclasses.replace(lognormal_trace(steps=6), every=3)
    back = Trace.load(t.save(tmp_path / "t.npz"))
    assert back.every == 3 and back.training_steps == 18
    with np.load(tmp_path / "t.npz") as z:
        old = {k: z[k] for k in z.files if k != "every"}
    old["format_version"] = np.array(5)
    np.savez(tmp_path / "old.npz", **old)
    assert Trace.load(tmp_path / "old.npz").every == 1
    with pytest.raises(ValueError, match="every must be an int >= 1, got 0"):
        dataclasses.replace(t, every=0)


def test_the_clock_repeats_each_recorded_step_and_pools_refuse_mixed_every():
    t = dataclasses.replace(lognormal_trace(steps=4, seed=1), every=3)
    clock = training_clock(t)
    assert clock.steps == 12 and clock.every == 1
    np.testing.assert_array_equal(clock.absmax, np.repeat(t.absmax, 3))
    assert training_clock(lognormal_trace(steps=4)) is not None
    with pytest.raises(ValueError, match=r"one every.*\(4, 1\), \(4, 3\)"):
        TracePool([t, dataclasses.replace(t, every=1)])
