"""Flushing measured on a sample of recorded steps (Probes(flush=True, flush_every=k), issue 39
item 3) on a real nnabla graph in cpu:half."""

import nnabla as nn
import nnabla.functions as F
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import TinyClassifier, cpu_context
from updater import DynamicLossScalingUpdater, DynamicScale, GradientRecorder, Probes, Trace
from updater.driver.recording.flush_schedule import flush_schedule

pytestmark = pytest.mark.nnabla


def _sum_model(scope):
    """loss = sum(w * x) in half, x fixed: w's gradient at seed s is ``x * s``."""
    values = np.array([1.0, 2.0**-14, 2.0**-24, 0.0], np.float32)
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(scope):
        x = nn.Variable.from_numpy_array(values)
        w = nn.parameter.get_parameter_or_create("w", x.shape, np.ones(x.shape, np.float32))
        loss = F.sum(w * x)
        solver = S.Sgd(0.0)
        solver.set_parameters({"w": w})
    return solver, loss


def test_flushing_is_measured_on_every_kth_recorded_step_only(tmp_path):
    """every=2, flush_every=3: 12 update() calls record calls 0, 2, ..., 10 and measure the
    flushing of recorded steps 0 and 3 (calls 0 and 6), 4 passes each."""
    solver, loss = _sum_model("flush_sampled")
    recorder = GradientRecorder(tmp_path / "t.npz", every=2)
    probes = Probes(flush=True, flush_every=3)
    policy = DynamicScale(init_scale=2.0**10)
    upd = DynamicLossScalingUpdater(
        solver, loss, None, policy=policy, recorder=recorder, probes=probes
    )
    for _ in range(12):
        upd.update()
    trace = recorder.trace()
    assert trace.steps == 6 and trace.every == 2
    measured = ~np.isnan(trace.flush_shares).all(axis=1)
    assert measured.tolist() == [True, False, False, True, False, False]
    assert recorder.probe_passes == 2 * 4
    np.testing.assert_array_equal(trace.flush_shares[0], trace.flush_shares[3])


def test_flush_every_is_checked_and_1_measures_every_step():
    with pytest.raises(ValueError, match="flush_every"):
        Probes(flush=True, flush_every=0)
    every = flush_schedule(Probes(flush=True, flush_every=1), rounds=1)
    assert [every.due(s, 9) for s in range(3)] == [True, True, True]
    assert flush_schedule(Probes(flush_every=2), rounds=1) is None  # no flush: nothing to sample


def _recorded_passes(tmp_path, name, probes, steps=32):
    """A tiny classifier (cpu:half) finite up to 2**15 (its steps' searches cost 1 pass) but
    for batch 9 (weight 300: its threshold moves, 5 passes, and the scale backs off);
    ``(passes per recorded step, measured steps, records)``."""
    model = TinyClassifier(f"flush_budget_{name}")
    recorder = GradientRecorder(tmp_path / f"{name}.npz")
    upd = DynamicLossScalingUpdater(
        model.solver,
        model.loss,
        model.feeder(weights={9: 300.0}),
        policy=DynamicScale(init_scale=2.0**12, growth_interval=4),
        recorder=recorder,
        probes=probes,
    )
    records = [
        (r.scale, r.update_applied, r.new_scale) for r in (upd.update() for _ in range(steps))
    ]
    trace = Trace.load(recorder.close())
    measured = np.flatnonzero(~np.isnan(trace.flush_shares).all(axis=1))
    return recorder.probe_passes / steps, measured, records


def test_the_default_flush_sampling_costs_at_most_two_passes_per_recorded_step(tmp_path):
    """Probes(overflow=True, flush=True) at its defaults: the recorder counts at most 2 extra
    passes per recorded step (every step measured cost over 4), the first step and some after
    it measured, training the same as with every step measured."""
    sampled, measured, records = _recorded_passes(tmp_path, "default", Probes(True, True))
    every, all_steps, same = _recorded_passes(
        tmp_path, "every", Probes(overflow=True, flush=True, flush_every=1)
    )
    assert sampled <= 2.0 < 4.0 < every
    assert all_steps.tolist() == list(range(32))
    assert 2 <= measured.size < 32
    assert records == same and any(not applied for _, applied, _ in records)
