"""The measuring stick of checked runs (issue 32, item 4): a run that probed its own thresholds
measures its safe scale with them, and on the recording run itself the measured metric then
agrees with the exact replay of its trace."""

import dataclasses

import numpy as np
import pytest

from sim.replay.measured import MeasuredRun, measured_paths, run_path
from sim.replay.run import simulate
from sim.traces.real import MODELS
from tests.paths import SHIPPED_TRACES
from updater.policy import DynamicScale
from updater.trace import Trace


def _recorded(model):
    """The shipped recording run of ``model``, its trace, and the run as a run that did not
    probe would measure it (the old stick: only the overflows it saw)."""
    run = MeasuredRun.load(run_path(SHIPPED_TRACES, model, "recorded"))
    trace = Trace.load(SHIPPED_TRACES / f"{model}.npz")
    seen = dataclasses.replace(run, overflow_scale=None, finite_scale=None)
    return run, trace, seen


def test_every_shipped_run_probed_its_thresholds_and_says_so():
    for model in MODELS:
        for path in measured_paths(SHIPPED_TRACES, model):
            run = MeasuredRun.load(path)
            assert run.stick == "probed" and run.summary()["stick"] == "probed", path


@pytest.mark.parametrize("model", MODELS)
def test_with_its_probed_thresholds_the_recording_run_measures_what_its_replay_predicts(model):
    run, trace, seen = _recorded(model)
    np.testing.assert_array_equal(run.overflow_scale, trace.overflow_scale)  # the same probes
    replay = simulate(DynamicScale(), trace, runs=1, jitter=0)
    np.testing.assert_array_equal(replay.scale[:, 0], run.scale)  # the same trajectory
    predicted = float(replay.metrics["below_half_safe"][0])
    assert run.metrics()["below_half_safe"] == pytest.approx(predicted, abs=1e-12)
    assert seen.stick == "seen"
    if model == "digits_conv_bn":  # the old stick cannot see the overflows inside BN
        assert seen.metrics()["below_half_safe"] > predicted + 0.02


def test_probed_thresholds_round_trip_and_must_come_together(tmp_path):
    probed, _, _ = _recorded("sequence_lstm")
    back = MeasuredRun.load(probed.save(tmp_path / "r.npz"))
    assert back.stick == "probed"
    np.testing.assert_array_equal(back.overflow_scale, probed.overflow_scale)
    np.testing.assert_array_equal(back.finite_scale, probed.finite_scale)
    half = dataclasses.replace(probed, finite_scale=probed.finite_scale[:-1])
    half.save(tmp_path / "half.npz")
    with pytest.raises(ValueError, match="must both be there, of the steps' length"):
        MeasuredRun.load(tmp_path / "half.npz")


@pytest.mark.nnabla
def test_a_checked_run_probes_its_own_thresholds(tmp_path):
    pytest.importorskip("sklearn")
    from sim.nnabla_studies.real_runs import measure_run
    from updater import Probes

    run = measure_run("digits_conv_bn", DynamicScale(), "dynamic", 4, probes=Probes(overflow=True))
    plain = measure_run("digits_conv_bn", DynamicScale(), "dynamic", 4)
    assert run.stick == "probed" and plain.stick == "seen"
    assert run.overflow_scale.shape == run.finite_scale.shape == (4,)
    assert (run.finite_scale > 0).all()  # every step bracketed or censored
    np.testing.assert_array_equal(run.scale, plain.scale)  # probing leaves training alone
    np.testing.assert_array_equal(run.loss, plain.loss)
