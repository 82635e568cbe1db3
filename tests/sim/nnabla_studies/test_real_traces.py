"""Traces recorded from real nnabla models (sim.nnabla_studies.real_traces) and the shipped ones in
the package (sim/traces/data)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.nnabla_studies.real_traces import DEFAULT_STEPS, record_model
from sim.replay.run import simulate
from sim.traces.real import MODELS, SHIPPED_DIR
from tests.paths import SHIPPED_TRACES
from updater.policy import DynamicScale
from updater.trace import NBINS, Trace

SHIPPED = SHIPPED_TRACES


@pytest.fixture
def nnabla_and_digits():
    pytest.importorskip("nnabla")
    pytest.importorskip("sklearn")


@pytest.mark.nnabla
@pytest.mark.parametrize("name", MODELS)
def test_a_quick_recording_writes_a_loadable_trace(tmp_path, nnabla_and_digits, name):
    steps, every = 5, 2
    row = record_model(name, tmp_path, steps=steps, every=every, seed=0)
    trace = Trace.load(tmp_path / f"{name}.npz")
    assert trace.name == name
    assert trace.steps == row["recorded"] == math.ceil(steps / every) == 3
    assert trace.counts.shape == (3, NBINS)
    assert (trace.counts.sum(axis=1) > 0).all()  # every recorded step has nonzero gradients
    assert (trace.absmax > 0).all() and not trace.nonfinite.any()
    # a finite step's histogram covers every parameter value (zeros included)
    finite = np.isinf(trace.overflow_scale)
    totals = trace.counts.sum(axis=1) + trace.zeros
    assert (totals[finite] == row["params"]).all()
    assert row["params"] > 0 and 0.0 <= row["accuracy"] <= 1.0
    assert math.isfinite(row["final_loss"]) and row["final_scale"] >= 1.0


@pytest.mark.nnabla
def test_the_same_seed_gives_the_same_trace(tmp_path, nnabla_and_digits):
    a = record_model("digits_conv_bn", tmp_path / "a", steps=4, every=1, seed=3)
    b = record_model("digits_conv_bn", tmp_path / "b", steps=4, every=1, seed=3)
    ta, tb = Trace.load(a["path"]), Trace.load(b["path"])
    assert ta.steps == tb.steps == 4
    np.testing.assert_array_equal(ta.counts, tb.counts)
    np.testing.assert_array_equal(ta.zeros, tb.zeros)
    np.testing.assert_array_equal(ta.absmax, tb.absmax)
    assert a["final_loss"] == b["final_loss"] and a["accuracy"] == b["accuracy"]
    c = record_model("digits_conv_bn", tmp_path / "c", steps=4, every=1, seed=4)
    assert not np.array_equal(Trace.load(c["path"]).absmax, ta.absmax)


def test_the_shipped_traces_load_are_small_and_replay():
    assert SHIPPED_DIR == SHIPPED  # the package finds them in the checkout it runs from
    paths = [SHIPPED / f"{name}.npz" for name in MODELS]
    missing = [str(p) for p in paths if not p.exists()]
    assert not missing, f"regenerate with python -m sim.nnabla_studies.real_traces: {missing}"
    assert sum(p.stat().st_size for p in paths) < 5 * 2**20
    for name, path in zip(MODELS, paths):
        trace = Trace.load(path)
        assert trace.name == name
        assert trace.steps == DEFAULT_STEPS[name]  # every step: replays line up with real runs
        assert trace.has_layers and len(trace.layer_names) >= 4
        assert (trace.counts.sum(axis=1) > 0).all()
        result = simulate(DynamicScale(), trace, runs=2, seed=0, progress=False)
        assert result.scale.shape[1] == 2
        assert np.isfinite(result.scale).all() and (result.scale > 0).all()


@pytest.mark.nnabla
def test_a_batch_order_keeps_the_weights_and_data_and_draws_other_batches(nnabla_and_digits):
    from sim.nnabla_studies.models import half_model

    seen = {}
    for order in (0, 0, 1):
        with half_model("digits_conv_bn", 3, order) as model:
            weights = {k: v.d.copy() for k, v in model["solver"].get_parameters().items()}
            model["feed"]()
            x = model["feed"].x_var.d.copy()
        if order in seen:  # the same order: the same first batch
            np.testing.assert_array_equal(seen[order][1], x)
        seen[order] = (weights, x)
    (w0, x0), (w1, x1) = seen[0], seen[1]
    assert w0.keys() == w1.keys()
    for k in w0:
        np.testing.assert_array_equal(w0[k], w1[k], err_msg=k)
    assert not np.array_equal(x0, x1)
    # order 0 is the builders' own order (seed + 1): the recordings made before orders existed
    first = np.random.RandomState(3 + 1).permutation(len(model["feed"].x))[: x0.shape[0]]
    np.testing.assert_array_equal(x0, model["feed"].x[first])


@pytest.mark.nnabla
def test_recording_in_two_processes_writes_the_same_files(tmp_path, nnabla_and_digits):
    from sim.nnabla_studies.real_traces import plan_tasks, record_all
    from sim.replay.measured import MeasuredRun, measured_paths

    rows = {}
    for jobs in (1, 2):
        rows[jobs] = record_all(
            tmp_path / str(jobs), plan_tasks(3, models=["digits_mlp"]), jobs=jobs
        )
    assert [r["path"].replace("/2/", "/1/") for r in rows[2]["runs"]] == [
        r["path"] for r in rows[1]["runs"]
    ]
    for k in (0, 1):
        a, b = (
            Trace.load(tmp_path / str(j) / ("digits_mlp" + ".order1" * k + ".npz")) for j in (1, 2)
        )
        np.testing.assert_array_equal(a.counts, b.counts)
        np.testing.assert_array_equal(a.overflow_scale, b.overflow_scale)
    for p1, p2 in zip(*(measured_paths(tmp_path / str(j), "digits_mlp") for j in (1, 2))):
        r1, r2 = MeasuredRun.load(p1), MeasuredRun.load(p2)
        np.testing.assert_array_equal(r1.scale, r2.scale)
        np.testing.assert_array_equal(r1.loss, r2.loss)
        assert (r1.label, r1.order) == (r2.label, r2.order)
