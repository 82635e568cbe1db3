"""Overflow probes of recorded steps (probes=Probes(overflow=True), updater/driver/recording)
on real nnabla graphs in cpu:half: the measured threshold, and training left bit-identical."""

import itertools

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import (
    TinyBNClassifier,
    assert_same_values,
    cpu_context,
    param_values,
    solver_state_values,
)
from updater import DynamicLossScalingUpdater, DynamicScale, GradientRecorder, Probes, Trace

pytestmark = pytest.mark.nnabla


def _sum_model(scope, values):
    """loss = sum(w * x) in half, x fixed: w's gradient at seed s is exactly ``values * s``."""
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(scope):
        x = nn.Variable.from_numpy_array(np.asarray(values, np.float32))
        w = nn.parameter.get_parameter_or_create("w", x.shape, np.ones(x.shape, np.float32))
        loss = F.sum(w * x)
        solver = S.Sgd(0.0)
        solver.set_parameters({"w": w})
    return solver, loss


@pytest.mark.parametrize("start, passes", [(2.0**10, 4), (2.0**15, 2)])
def test_the_probes_find_the_smallest_overflowing_power_of_two(tmp_path, start, passes):
    """|grad| = 4 * seed overflows float16 from seed 2**14 (4 * 2**14 = 65536 rounds to inf):
    from 2**10 the probes go up 2**11..2**14; from 2**15 (overflowed) down to 2**13, whose
    finite gradients are recorded instead."""
    solver, loss = _sum_model(f"probe_sum_{int(start)}", [4.0, -1.0, 0.5, 0.0])
    policy = DynamicScale(init_scale=start, growth_interval=1000)
    recorder = GradientRecorder(tmp_path / "t.npz")
    probes = Probes(overflow=True)
    upd = DynamicLossScalingUpdater(
        solver, loss, None, policy=policy, recorder=recorder, probes=probes
    )
    record = upd.update()
    trace = recorder.trace()
    assert record.update_applied == (start < 2.0**14)
    assert trace.overflow_scale.tolist() == [2.0**14]
    assert trace.finite_scale.tolist() == [2.0**13]  # the bracket's other end
    assert trace.absmax.tolist() == [4.0]  # the true largest gradient, also after an overflow
    assert trace.counts.sum() == 3 and trace.zeros.tolist() == [1]
    assert recorder.probe_passes == passes
    assert upd.passes == 1  # probes are not counted as training passes


@pytest.mark.parametrize("start, passes", [(2.0**14, 1), (2.0**15, 0)])
def test_a_step_finite_at_the_highest_probed_scale_is_stored_as_above_it(tmp_path, start, passes):
    """|grad| = seed / 4 never overflows up to 2**15, the policy's max_scale: censored."""
    solver, loss = _sum_model(f"probe_censored_{int(start)}", [0.25, -1.0 / 8])
    policy = DynamicScale(init_scale=start, growth_interval=1000)
    recorder = GradientRecorder(tmp_path / "t.npz")
    probes = Probes(overflow=True)
    upd = DynamicLossScalingUpdater(
        solver, loss, None, policy=policy, recorder=recorder, probes=probes
    )
    upd.update()
    back = Trace.load(recorder.close())
    assert back.overflow_scale.tolist() == [np.inf]
    assert back.finite_scale.tolist() == [2.0**15]
    assert recorder.probe_passes == passes


def test_without_probes_the_recorder_keeps_the_old_rule(tmp_path):
    """Control: the same finite step recorded without probes shows no overflow."""
    solver, loss = _sum_model("probe_sum_off", [4.0, -1.0, 0.5, 0.0])
    recorder = GradientRecorder(tmp_path / "t.npz")
    upd = DynamicLossScalingUpdater(
        solver, loss, None, policy=DynamicScale(init_scale=2.0**10), recorder=recorder
    )
    upd.update()
    assert recorder.trace().overflow_scale.tolist() == [np.inf]
    assert recorder.trace().finite_scale.tolist() == [0.0]  # not known
    assert recorder.probe_passes == 0


def test_measured_flushing_against_float32(tmp_path):
    """w's gradient is x * seed. 2**-24 (float16's smallest subnormal) flushes at seeds up to
    2**-1 (2**-25 is a tie and rounds to even, 0) and survives from 2**0 on; 2**-30 is already 0
    as a float16 input, so it is lost at every scale (float16 arithmetic upstream, which no
    binade model sees); 1 and 2**-14 never flush. The float32 copy sees all four. The scales
    measured: the policy's top (2**2) and 2**-4, 2**-8, 2**-12 times it, with the seed 2**-1 in
    place of 2**-2."""
    solver, loss = _sum_model("probe_flush", [1.0, 2.0**-14, 2.0**-24, 2.0**-30, 0.0])
    recorder = GradientRecorder(tmp_path / "t.npz")
    policy = DynamicScale(init_scale=2.0**-1, min_scale=2.0**-10, max_scale=2.0**2)
    upd = DynamicLossScalingUpdater(
        solver,
        loss,
        None,
        policy=policy,
        recorder=recorder,
        probes=Probes(flush=True, flush_every=1),
    )
    upd.update()
    trace = recorder.trace()
    assert trace.flush_scales.tolist() == [[2.0**-10, 2.0**-6, 2.0**-1, 2.0**2]]
    assert trace.flush_shares.tolist() == [[0.5, 0.5, 0.5, 0.25]]
    assert recorder.probe_passes == 4  # float32 once, float16 at three other scales
    assert not trace.overflow_probed and Trace.load(recorder.close()).has_flush


OPTIONS = [{"overflow": True}, {"flush": True}]
SCOPES = itertools.count()  # nnabla's parameter registry is global: one scope per model


def _train(model, tmp_path, options, steps, **kwargs):
    feeder = model.feeder(weights={2: 300.0, 5: 3000.0, 8: 30.0})
    recorder = GradientRecorder(tmp_path / f"{model.scope}.npz")
    upd = DynamicLossScalingUpdater(
        model.solver,
        model.loss,
        feeder,
        policy=DynamicScale(init_scale=2.0**12, growth_interval=2),
        recorder=recorder,
        probes=Probes(**options),
        **kwargs,
    )
    records = [upd.update() for _ in range(steps)]
    rows = [(r.scale, r.update_applied, r.new_scale, r.attempts) for r in records]
    counters = (upd.passes, upd.batches, upd.overflows, feeder.calls)
    return rows, counters, recorder


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"accum_grad": 2}, {"on_overflow": "retry"}, {"on_overflow": "retry", "accum_grad": 2}],
)
def test_probing_leaves_a_batchnorm_model_bit_identical(tmp_path, kwargs, options):
    """Parameters, BatchNormalization's running statistics, solver states, records and counters
    are the same with and without probes, through finite and overflowing steps."""
    runs = []
    for opts in ({}, options):
        # lr 0.005: at 0.05 the x300 and x3000 batches, applied at low scales in retry mode,
        # blow fc1 up until every batch makes the float16 running variance inf (a bad batch)
        model = TinyBNClassifier(f"probe_bn_{next(SCOPES)}", lr=0.005)
        rows, counters, recorder = _train(model, tmp_path, opts, 10, **kwargs)
        runs.append((rows, counters, recorder, model))
    (rows0, counters0, rec0, m0), (rows1, counters1, rec1, m1) = runs
    assert rows0 == rows1 and counters0 == counters1
    assert_same_values(param_values(m0.params), param_values(m1.params))  # running stats too
    assert_same_values(solver_state_values(m0.solver), solver_state_values(m1.solver))
    assert counters0[2] > 0, "the run must overflow at least once"
    assert rec1.probe_passes > 0
    over0, over1 = rec0.trace().overflow_scale, rec1.trace().overflow_scale
    if "overflow" in options:
        assert (over1 <= over0).all() and (over1 < over0).any()  # measured below the seed used
    else:
        assert (over1 == over0).all() and rec1.trace().has_flush


def _lstm_model(scope):
    """A one-layer PF.lstm over 5 steps, Adam; returns (solver, loss, feed, params)."""
    rng = np.random.RandomState(0)
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(scope):
        x = nn.Variable((5, 4, 3))
        t = nn.Variable((4, 1))
        h0 = nn.Variable.from_numpy_array(np.zeros((1, 1, 4, 6), np.float32))
        c0 = nn.Variable.from_numpy_array(np.zeros((1, 1, 4, 6), np.float32))
        y, _, _ = PF.lstm(x, h0, c0, rng=rng, name="lstm")
        head = PF.affine(y[4], 3, w_init=I.NormalInitializer(0.4, rng=rng), name="head")
        loss = F.mean(F.softmax_cross_entropy(head, t)) * 300.0  # overflows near 2**13
        params = nn.get_parameters()
        solver = S.Adam(0.01)
        solver.set_parameters(params)
    data = np.random.RandomState(1)

    def feed():
        x.d = data.randn(*x.shape) * 3
        t.d = data.randint(0, 3, t.shape)

    return solver, loss, feed, params


def test_probing_leaves_an_lstm_bit_identical(tmp_path):
    """PF.lstm: each probe runs its own forward (one forward reused for several backwards is
    wrong there); training matches a run without probes bit for bit."""
    finals = []
    for probe in (False, True):
        solver, loss, feed, params = _lstm_model(f"probe_lstm_{probe}")
        probes = Probes(overflow=probe, flush=probe)
        recorder = GradientRecorder(tmp_path / f"l{probe}.npz")
        policy = DynamicScale(init_scale=2.0**13, growth_interval=2)
        upd = DynamicLossScalingUpdater(
            solver, loss, feed, policy=policy, recorder=recorder, probes=probes
        )
        rows = [(r.scale, r.update_applied) for r in (upd.update() for _ in range(6))]
        finals.append((rows, param_values(params), solver_state_values(solver), recorder))
    (rows0, p0, s0, _), (rows1, p1, s1, rec1) = finals
    assert rows0 == rows1
    assert_same_values(p0, p1)
    assert_same_values(s0, s1)
    assert rec1.probe_passes > 0 and np.isfinite(rec1.trace().overflow_scale).any()


@pytest.mark.parametrize("probe", ["overflow", "flush"])
def test_probes_keep_the_statistics_dtype(tmp_path, probe):
    """Issue 28: after a probed recording, BatchNormalization's statistics (float16 arrays after
    a half forward) read back as float32 arrays; they must keep their dtype and values, as after
    the same step without a recorder."""
    runs = []
    probed = (GradientRecorder(tmp_path / "t.npz"), Probes(**{probe: True}))
    for recorder, probes in (probed, (None, None)):
        nn.clear_parameters()
        model = TinyBNClassifier("probe_dtype")
        feeder = model.feeder()
        upd = DynamicLossScalingUpdater(
            model.solver, model.loss, feeder, recorder=recorder, probes=probes
        )
        upd.update()
        stats = {k: v for k, v in model.params.items() if k.endswith(("/mean", "/var"))}
        runs.append({k: (v.d.copy(), np.dtype(v.data.dtype)) for k, v in stats.items()})
    assert runs[0].keys() == runs[1].keys() and len(runs[0]) == 2
    for k, (values, dtype) in runs[0].items():
        assert dtype == runs[1][k][1] == np.float16, k
        assert np.array_equal(values, runs[1][k][0]), k
