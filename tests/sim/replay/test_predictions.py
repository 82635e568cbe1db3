"""Real runs measured against a float32 shadow (sim.nnabla_studies.real_runs) and the simulator's
predictions from recorded traces checked against them (sim.replay.predictions), on real nnabla
models."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sim.nnabla_studies.real_runs import measure_run
from sim.nnabla_studies.real_traces import plan_tasks, record_all
from sim.replay.measured import CHECKED_POLICIES, MeasuredRun, measured_paths, run_path
from sim.replay.pool import TracePool
from sim.replay.predictions import PREDICTED, prediction_rows
from sim.report.experiments import QUICK, check_real_traces, load_real_pools, load_real_traces
from sim.traces.real import CHECK_ORDERS, MODELS, RECORDINGS, trace_path
from tests.paths import SHIPPED_TRACES
from updater.driver.recording.probes import flushed_shares
from updater.policy import DynamicScale, StaticScale
from updater.trace import Trace

SHIPPED = SHIPPED_TRACES


@pytest.fixture
def nnabla_and_digits():
    pytest.importorskip("nnabla")
    pytest.importorskip("sklearn")


def test_flushed_shares_count_zeroed_true_values_and_split_the_small_ones():
    true = [np.array([2.0**-30, 1.0, 0.0, 2.0**-10]), np.array([2.0**-20, 3.0])]
    half = [np.array([0.0, 1.0, 0.0, 0.0]), np.array([0.0, 3.0])]
    # nonzero true values: 5; zeroed: 2**-30, 2**-10, 2**-20; at scale 2**4 only 2**-30 * 16 =
    # 2**-26 is below 2**-24 (2**-20 * 16 = 2**-16 and 2**-10 * 16 are representable)
    lost, small = flushed_shares(true, half, 2.0**4)
    assert lost == pytest.approx(3 / 5) and small == pytest.approx(1 / 5)


@pytest.mark.nnabla
def test_a_measured_run_keeps_every_step_and_round_trips(tmp_path, nnabla_and_digits):
    run = measure_run("digits_mlp", StaticScale(8.0), "static-8", steps=4, seed=0)
    assert run.steps == 4 and run.model == "digits_mlp" and run.label == "static-8"
    np.testing.assert_array_equal(run.scale, 8.0)
    assert run.applied.all() and run.loss_finite.all()
    assert (run.absmax > 0).all()
    assert ((0 <= run.flushed_small) & (run.flushed_small <= run.flushed) & (run.flushed < 1)).all()
    m = run.metrics()
    assert m["skipped"] == 0 and m["below_half_safe"] == 1.0  # scale 8 is far below safe
    assert m["mean_flushed"] == pytest.approx(run.flushed.mean())
    back = MeasuredRun.load(run.save(tmp_path / "r.npz"))
    assert back.policy == run.policy and back.accuracy == run.accuracy
    for name in ("scale", "applied", "loss_finite", "absmax", "flushed", "flushed_small"):
        np.testing.assert_array_equal(getattr(back, name), getattr(run, name))


def _final_parameters(monkeypatch, sink):
    """Make the half_model that measured runs use copy every parameter (running statistics
    included) into ``sink`` when its block ends, before it clears them."""
    import contextlib

    import nnabla as nn

    import sim.nnabla_studies.real_runs as rt

    original = rt.half_model

    @contextlib.contextmanager
    def copying(name, seed, order=0):
        with original(name, seed, order) as model:
            yield model
            sink.update({k: v.d.copy() for k, v in nn.get_parameters(grad_only=False).items()})

    monkeypatch.setattr(rt, "half_model", copying)


@pytest.mark.nnabla
def test_the_shadow_pass_leaves_training_as_without_it(monkeypatch, nnabla_and_digits):
    """The float32 shadow shares parameters and running statistics with the float16 model; its
    passes must leave training bit-identical to a plain run (BatchNormalization's running
    statistics move in every training forward pass, the shadow's included)."""
    from sim.nnabla_studies.models import half_model
    from updater import DynamicLossScalingUpdater

    with half_model("digits_conv_bn", 1) as model:
        updater = DynamicLossScalingUpdater(model["solver"], model["loss"], model["feed"])
        scales = [updater.update().scale for _ in range(3)]
        import nnabla as nn

        plain = {k: v.d.copy() for k, v in nn.get_parameters(grad_only=False).items()}
    measured: dict = {}
    _final_parameters(monkeypatch, measured)
    run = measure_run("digits_conv_bn", DynamicScale(), "dynamic", steps=3, seed=1)
    assert run.scale.tolist() == scales and run.applied.all()
    assert any("mean" in k for k in plain)  # the running statistics are compared too
    assert plain.keys() == measured.keys()
    for k in plain:
        np.testing.assert_array_equal(plain[k], measured[k], err_msg=k)


@pytest.mark.nnabla
def test_predictions_from_a_recorded_trace_against_its_real_runs(tmp_path, nnabla_and_digits):
    done = record_all(tmp_path, plan_tasks(steps=6, models=["digits_mlp"]), seed=0)
    assert [(r["policy"], r["order"]) for r in done["runs"]] == [
        (p, k) for k in CHECK_ORDERS for p in CHECKED_POLICIES
    ]
    assert [r["order"] for r in done["traces"]] == list(RECORDINGS) == [0, 1]
    pool = TracePool([Trace.load(trace_path(tmp_path, "digits_mlp", k)) for k in RECORDINGS])
    assert pool.steps == 6  # every step recorded: the replay lines up with the real runs
    # the two batch orders start from the same weights and see other batches
    assert pool.traces[0].absmax[0] != pool.traces[1].absmax[0]
    rows = prediction_rows({"digits_mlp": pool}, tmp_path)
    assert [(r["policy"], r["order"], r["metric"]) for r in rows] == [
        (p, k, m) for p in CHECKED_POLICIES for k in CHECK_ORDERS for m in PREDICTED
    ]
    for r in rows:
        assert r["predicted"] == pytest.approx(np.mean(r["each"])) and len(r["each"]) == 2
        assert r["error"] == pytest.approx(r["predicted"] - r["measured"])
        if r["level"] is not None:  # the metrics with an interval
            assert r["low"] <= r["high"] and len(r["alone"]) == 2
    legacy = {r["metric"]: r for r in rows if r["policy"] == "nnabla-legacy"}
    # scale 8 against gradients of about 0.1-1: every step far below the safe scale, both ways
    assert legacy["below_half_safe"]["predicted"] == legacy["below_half_safe"]["measured"] == 1
    assert legacy["skipped"]["predicted"] == legacy["skipped"]["measured"] == 0


@pytest.mark.nnabla
def test_a_run_of_another_length_or_a_missing_run_is_refused(tmp_path, nnabla_and_digits):
    record_all(tmp_path, plan_tasks(3, models=["digits_mlp"], policy_runs=False), seed=0)
    trace = Trace.load(tmp_path / "digits_mlp.npz")
    with pytest.raises(
        ValueError, match="no measured run .*python -m sim.nnabla_studies.real_traces"
    ):
        prediction_rows({"digits_mlp": trace}, tmp_path)
    for label, policy in CHECKED_POLICIES.items():
        measure_run("digits_mlp", policy, label, steps=2).save(
            run_path(tmp_path, "digits_mlp", label, CHECK_ORDERS[0])
        )
    with pytest.raises(ValueError, match="has 2 steps but the trace digits_mlp has 3"):
        prediction_rows({"digits_mlp": trace}, tmp_path)


def test_the_report_names_what_is_missing_from_the_real_traces_folder(tmp_path):
    config = dataclasses.replace(QUICK, real_traces=str(tmp_path))
    with pytest.raises(
        FileNotFoundError, match="digits_mlp.npz.*python -m sim.nnabla_studies.real_traces"
    ):
        check_real_traces(config)
    assert load_real_traces(dataclasses.replace(QUICK, real_traces=None)) == {}


def test_the_shipped_traces_and_runs_line_up():
    config = dataclasses.replace(QUICK, real_traces=str(SHIPPED))
    check_real_traces(config)
    for model, pool in load_real_pools(config).items():
        assert model in MODELS and len(pool.traces) == len(RECORDINGS)
        for path in measured_paths(SHIPPED, model):
            run = MeasuredRun.load(path)
            assert run.steps == pool.steps and run.model == model
            assert path == run_path(SHIPPED, model, run.label, run.order)


def test_the_old_call_fails_naming_the_new_one(tmp_path):
    """Issue 39: prediction_rows(traces, runs_dir) with runs in batch order 0 (the call
    before checked runs had their own order) pointed to a command that records only the shipped
    models; it names orders= now, and a bare trace in place of the mapping names the mapping."""
    import shutil

    trace = Trace.load(trace_path(SHIPPED, "digits_mlp"))
    for label in CHECKED_POLICIES:
        shutil.copy(
            run_path(SHIPPED, "digits_mlp", label, CHECK_ORDERS[0]),
            run_path(tmp_path, "digits_mlp", label, 0),
        )
    with pytest.raises(ValueError, match=r"in batch order\(s\) 0: call .*orders=\(0,\)"):
        prediction_rows({"digits_mlp": trace}, tmp_path)
    rows = prediction_rows({"digits_mlp": trace}, tmp_path, orders=(0,))
    assert {r["order"] for r in rows} == {0}
    with pytest.raises(TypeError, match=r"mapping of model name .*prediction_rows\(\{name"):
        prediction_rows(trace, tmp_path)
