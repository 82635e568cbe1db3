"""The nnabla driver on real tiny graphs in cpu:half: skips, retries, growth, NaN, validation."""

import math

import nnabla as nn
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from nnabla.experimental.mixed_precision_training import (
    DynamicLossScalingUpdater as NnablaUpdater,
)
from nnabla.monitor import Monitor

from tests.nnabla_models import (
    GRADIENT_RUNS,
    TinyClassifier,
    assert_same_values,
    gradient_values,
    inspect,
    param_values,
    set_grads,
    solver_state_values,
)
from updater import DynamicScale, HeadroomScale, StaticScale
from updater.driver.arrays import grad_stats, host_view
from updater.driver.updater import (
    DynamicLossScalingUpdater,
    NonFiniteGradientsError,
    StepRecord,
)

pytestmark = pytest.mark.nnabla

with np.errstate(over="ignore"):
    ROUNDS_TO_INF = np.full((3, 8), 65520.0).astype(np.float16)  # 65520 rounds to inf
SPIKE = 1e3  # loss weight of a spike batch: overflows float16 at scales above ~64


def make(scope="m", solver="momentum", type_config="half", **model_kw):
    return TinyClassifier(scope, solver=solver, type_config=type_config, **model_kw)


# ---------------------------------------------------------------- skipping


@pytest.mark.parametrize("solver", ["momentum", "adam"])
def test_skipped_step_leaves_parameters_and_solver_state_bit_identical(solver):
    m = make(solver=solver)
    feed = m.feeder(weights={2: SPIKE})
    u = DynamicLossScalingUpdater(m.solver, m.loss, feed, scale=2.0**12, N=1000)
    u.update()
    u.update()
    params, states = param_values(m.params), solver_state_values(m.solver)
    rec = u.update()  # the spike batch
    assert (rec.update_applied, rec.scale, rec.new_scale) == (False, 2.0**12, 2.0**11)
    assert rec.loss_finite is True  # a real overflow, not a bad batch
    assert_same_values(params, param_values(m.params))
    assert_same_values(states, solver_state_values(m.solver))
    assert (feed.calls, u.passes, u.skips, u.overflows, u.updates_applied) == (3, 3, 1, 1, 2)
    rec = u.update()  # the next batch trains normally at the lowered scale
    assert rec.update_applied and rec.scale == 2.0**11
    assert not np.array_equal(params["fc1/affine/W"], param_values(m.params)["fc1/affine/W"])


def test_skip_mode_consumes_exactly_accum_grad_batches_per_update():
    m = make()
    feed = m.feeder(weights={3: SPIKE, 4: SPIKE, 9: SPIKE})
    u = DynamicLossScalingUpdater(m.solver, m.loss, feed, scale=2.0**12, accum_grad=2)
    applied = []
    for k in range(6):
        rec = u.update()
        assert feed.calls == 2 * (k + 1)
        assert rec.attempts == 1
        applied.append(rec.update_applied)
    # calls 3 (update 1), 4 (update 2) and 9 (update 4) are spikes
    assert applied == [True, False, False, True, False, True]
    assert (u.batches, u.passes, u.skips, u.steps) == (12, 12, 3, 6)


@pytest.mark.parametrize("accum", [1, 2])
def test_retry_mode_recomputes_the_same_batches_without_new_feeder_calls(accum):
    spike = {2 * accum - 1: SPIKE}  # the last batch of the second update
    m = make(scope="r")
    feed = m.feeder(weights=spike)
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, feed, scale=2.0**12, accum_grad=accum, on_overflow="retry"
    )
    first = u.update()
    rec = u.update()  # the spike overflows until the scale is low enough
    assert first.attempts == 1
    assert rec.update_applied and rec.attempts > 1
    assert feed.calls == 2 * accum
    assert u.passes == accum + accum * rec.attempts
    assert rec.scale == 2.0**12 / 2 ** (rec.attempts - 1)
    assert u.overflows == rec.attempts - 1 and u.skips == 0
    retried = param_values(m.params)

    # Reference: the same model and first step, then step 2 by hand at the scale that worked.
    nn.clear_parameters()
    ref = make(scope="r")
    ref_feed = ref.feeder(weights=spike)
    DynamicLossScalingUpdater(
        ref.solver, ref.loss, ref_feed, policy=StaticScale(2.0**12), accum_grad=accum
    ).update()
    ref.solver.zero_grad()
    for _ in range(accum):
        ref_feed()
        ref.loss.forward(clear_no_need_grad=True)
        ref.loss.backward(rec.scale, clear_buffer=True)
    ref.solver.scale_grad(1.0 / rec.scale)
    ref.solver.update()
    assert_same_values(retried, param_values(ref.params))


def test_retry_mode_gives_up_after_max_retries_and_skips():
    m = make()
    feed = m.feeder(weights={0: 1e4})
    policy = DynamicScale(init_scale=2.0**12, min_scale=2.0**9, hysteresis=1)
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, feed, policy=policy, on_overflow="retry", max_retries=2
    )
    params = param_values(m.params)
    rec = u.update()
    assert (rec.attempts, rec.update_applied, feed.calls, u.passes) == (3, False, 1, 3)
    assert rec.scale == 2.0**10 and rec.new_scale == 2.0**9
    assert_same_values(params, param_values(m.params))


# ---------------------------------------------------------------- growth


def test_growth_happens_exactly_on_the_nth_consecutive_finite_step():
    """Rule: grow by scaling_factor on the N-th consecutive finite step; overflow halves and
    restarts the count."""
    m = make()
    feed = m.feeder(weights={7: 1e4})  # overflows at scale 16
    u = DynamicLossScalingUpdater(m.solver, m.loss, feed, scale=4.0, N=3, history=100)
    records = [u.update() for _ in range(13)]
    expected, s, good = [], 4.0, 0
    for r in records:
        good = good + 1 if r.update_applied else 0
        if not r.update_applied:
            s /= 2
        elif good == 3:
            s, good = s * 2, 0
        expected.append(s)
    assert [r.new_scale for r in records] == expected
    assert [r.update_applied for r in records] == [k != 7 for k in range(13)]
    assert expected == [4, 4, 8, 8, 8, 16, 16, 8, 8, 8, 16, 16, 16]
    assert [r.scale for r in records[1:]] == expected[:-1]


def test_legacy_trio_grows_on_schedule_where_nnabla_grows_late():
    """nnabla's updater grows after N+2 finite steps, then every N+1; ours after N, then N."""
    n = 3
    m = make(scope="ours")
    ours = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), scale=4.0, N=n)
    o = make(scope="theirs")
    theirs = NnablaUpdater(o.solver, o.loss, o.feeder(), scale=4.0, N=n)
    our_scales, their_scales = [], []
    for _ in range(10):
        our_scales.append(ours.update().new_scale)
        theirs.update()
        their_scales.append(theirs.scale)
    assert our_scales == [4, 4, 8, 8, 8, 16, 16, 16, 32, 32]
    assert their_scales == [4, 4, 4, 4, 8, 8, 8, 8, 16, 16]


def test_scale_respects_bounds_of_the_legacy_mapping():
    m = make()
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), scale=2.0**14, N=1)
    assert [u.update().new_scale for _ in range(3)] == [2.0**15] * 3


# ---------------------------------------------------------------- persistent non-finite


def test_persistent_nan_in_data_raises_naming_inputs_params_and_scale():
    """Issue 21: a NaN input is bad data: every step is skipped at the same scale (the old
    updater halved it to its floor), and the error names the input."""
    m = make()
    feed = m.feeder(nan_calls=None)
    u = DynamicLossScalingUpdater(m.solver, m.loss, feed, scale=8.0, max_consecutive_nonfinite=5)
    params, states = param_values(m.params), solver_state_values(m.solver)
    for _ in range(4):
        rec = u.update()
        assert not rec.update_applied and rec.loss_finite is False and rec.bad_batch
        assert rec.new_scale == rec.scale == 8.0
    with pytest.raises(NonFiniteGradientsError) as info:
        u.update()
    err = info.value
    assert isinstance(err, FloatingPointError)
    text = str(err)
    assert "5 consecutive update() calls without an applied update" in text
    assert "bad data, which no loss scale fixes" in text
    assert err.input_names == [
        "input 0 of Affine 'Affine' (8, 4): inf/NaN or not |x| < 65520, read in float16 by "
        "input 0 of Affine 'Affine'"
    ]
    assert err.input_names[0] in text
    assert "fc1/affine/W" in text and "fc2/affine/b" in text
    assert "loss scale 8" in text
    assert err.loss_finite is False and err.scale == 8.0 and err.consecutive == 5
    assert sorted(err.param_names) == sorted(m.params)
    assert 1.0 <= u.scale <= 2.0**15
    assert (feed.calls, u.passes) == (5, 5)  # one forward/backward per call, no recursion
    assert_same_values(params, param_values(m.params))
    assert_same_values(states, solver_state_values(m.solver))


def test_retry_mode_counts_update_calls_not_attempts_toward_the_error():
    """Each call retries at strictly lower scales down to min_scale, then skips; the error
    comes after max_consecutive_nonfinite CALLS (the old code counted attempts: 1 call)."""
    m = make()
    feed = m.feeder(weights={k: 1e4 for k in range(10)})
    policy = DynamicScale(init_scale=2.0**12, min_scale=2.0**10, hysteresis=1)
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, feed, policy=policy, on_overflow="retry", max_consecutive_nonfinite=4
    )
    params = param_values(m.params)
    first = u.update()  # 4096, 2048, 1024 overflow; at the floor no lower seed exists: skip
    assert (first.attempts, first.update_applied, first.scale) == (3, False, 2.0**10)
    for _ in range(2):  # at the floor: one attempt, no retry at an unchanged scale
        rec = u.update()
        assert (rec.attempts, rec.update_applied, rec.scale) == (1, False, 2.0**10)
    with pytest.raises(NonFiniteGradientsError, match="loss was finite") as info:
        u.update()
    assert info.value.loss_finite is True and info.value.consecutive == 4
    assert info.value.scale == 2.0**10
    assert (feed.calls, u.passes, u.overflows, u.skips) == (4, 6, 6, 4)
    assert_same_values(params, param_values(m.params))


def test_a_clean_batch_after_nan_batches_resets_the_count():
    m = make()
    feed = m.feeder(nan_calls=[0, 1, 3, 4])
    u = DynamicLossScalingUpdater(m.solver, m.loss, feed, max_consecutive_nonfinite=3)
    applied = [u.update().update_applied for _ in range(6)]
    assert applied == [False, False, True, False, False, True]
    assert u.consecutive_nonfinite == 0


def test_nnabla_updater_recurses_on_new_batches_while_ours_skips_one():
    """Measured side by side: nnabla's retry drops batches and drives the scale to ~0."""
    o = make(scope="theirs")
    feed = o.feeder(weights={1: SPIKE})
    theirs = NnablaUpdater(o.solver, o.loss, feed, scale=2.0**12, accum_grad=2)
    theirs.update()
    assert feed.calls > 2  # the overflowing group was replaced by new batches
    nan_model = make(scope="nan")
    nan_feed = nan_model.feeder(nan_calls=None)
    nan_theirs = NnablaUpdater(nan_model.solver, nan_model.loss, nan_feed, scale=8.0)
    nan_theirs.update()  # returns silently
    assert nan_feed.calls == 101 and nan_theirs.scale == 8.0 / 2.0**101

    m = make(scope="ours")
    our_feed = m.feeder(weights={1: SPIKE})
    ours = DynamicLossScalingUpdater(m.solver, m.loss, our_feed, scale=2.0**12, accum_grad=2)
    assert not ours.update().update_applied
    assert our_feed.calls == 2


# ---------------------------------------------------------------- finite check


@pytest.mark.parametrize("need_absmax", [True, False])
@pytest.mark.parametrize(
    "case,type_config",
    GRADIENT_RUNS,
)
def test_finite_check_equals_nnabla_check(case, type_config, need_absmax):
    m = make(type_config=type_config)
    dtype = np.float16 if type_config == "half" else np.float32
    values = gradient_values(m, case, dtype, seed=3)
    set_grads(m, values)
    arrays = [p.grad.get_data("r") for p in m.solver.get_parameters().values()]
    assert arrays[0].dtype == dtype
    flags, absmax = grad_stats(arrays, need_absmax)
    nnabla_says_bad = m.solver.check_inf_or_nan_grad()
    assert all(flags) == (not nnabla_says_bad)
    bad = {n for n, p in m.params.items() if not np.isfinite(values[n]).all()}
    assert {n for n, ok in zip(m.solver.get_parameters(), flags) if not ok} == bad
    all_values = np.concatenate([a.astype(np.float64).ravel() for a in values.values()])
    if not np.isfinite(all_values).all():
        assert absmax == math.inf
    elif need_absmax:
        assert absmax == np.abs(all_values).max()
    else:
        assert absmax is None


@given(
    hnp.arrays(np.float16, (3, 8), elements=st.floats(width=16, allow_nan=True)),
)
@example(np.full((3, 8), 2.0**-25, np.float16))
@example(np.full((3, 8), 65504, np.float16))
@example(np.full((3, 8), 2.0**-14, np.float16))
@example(ROUNDS_TO_INF)
def test_finite_check_equals_nnabla_check_on_generated_float16(values):
    nn.clear_parameters()
    m = make()
    name = "fc1/affine/W"
    p = m.params[name]
    filled = np.resize(values, p.shape).astype(np.float16)
    set_grads(m, {name: filled})
    flags, absmax = grad_stats([q.grad.get_data("r") for q in m.params.values()])
    assert all(flags) == (not m.solver.check_inf_or_nan_grad())
    if all(flags):
        assert absmax == np.abs(filled.astype(np.float64)).max()


@pytest.mark.parametrize("type_config", ["half", "float"])
def test_gradient_views_are_the_get_data_memory_and_keep_the_dtype(type_config):
    m = make(type_config=type_config)
    dtype = np.float16 if type_config == "half" else np.float32
    feed = m.feeder()
    m.solver.zero_grad()
    feed()
    m.loss.forward()
    m.loss.backward(8.0)
    for p in m.params.values():
        view = host_view(p.grad)
        assert view.dtype == dtype and p.grad.dtype == dtype  # read in place, never cast
        data = p.grad.get_data("r")
        assert view.ctypes.data == data.ctypes.data  # the same host memory, no copy
        assert np.array_equal(view, data.ravel())
        assert view.any()  # real gradients, not a fresh zeroed buffer
    # nnabla's own calls still see the same arrays after the views were taken
    before = {n: p.grad.get_data("r").copy() for n, p in m.params.items()}
    assert not m.solver.check_inf_or_nan_grad()
    m.solver.scale_grad(0.5)
    for n, p in m.params.items():
        assert np.array_equal(host_view(p.grad), (before[n] * dtype(0.5)).ravel())


@pytest.mark.parametrize(
    "case,type_config",
    GRADIENT_RUNS,
)
def test_updater_numpy_check_through_views_equals_nnabla_check(case, type_config):
    m = make(type_config=type_config)
    dtype = np.float16 if type_config == "half" else np.float32
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), finite_check="numpy")
    values = gradient_values(m, case, dtype, seed=5)
    set_grads(m, values)
    arrays, finite, absmax, bad = inspect(u)[:4]
    assert finite == (not m.solver.check_inf_or_nan_grad())
    assert set(bad) == {n for n, v in values.items() if not np.isfinite(v).all()}
    assert [a.dtype for a in arrays] == [dtype] * len(values)
    assert absmax is None  # the legacy policy does not ask for |g| max
    for p in m.params.values():
        assert p.grad.dtype == dtype


@given(hnp.arrays(np.float16, (3, 8), elements=st.floats(width=16, allow_nan=True)))
@example(np.full((3, 8), 2.0**-25, np.float16))
@example(np.full((3, 8), 2.0**-24, np.float16))
@example(np.full((3, 8), 65504, np.float16))
@example(ROUNDS_TO_INF)
def test_updater_numpy_check_through_float16_views_on_generated_values(values):
    nn.clear_parameters()
    m = make()
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), finite_check="numpy")
    name = "fc2/affine/W"
    filled = np.resize(values, m.params[name].shape).astype(np.float16)
    set_grads(m, {name: filled})
    _, finite, _, bad = inspect(u)[:4]
    assert finite == (not m.solver.check_inf_or_nan_grad())
    assert bad == ([] if np.isfinite(filled).all() else [name])


@pytest.mark.parametrize("hidden,expected", [(8, "nnabla"), (2**15, "numpy")])
def test_auto_check_uses_numpy_views_on_cpu_for_large_models(hidden, expected):
    # 4 inputs -> hidden -> 3 classes: 8 hidden units hold 67 values, 2**15 hold 262147
    m = make(type_config="float", hidden=hidden)
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), finite_check="auto")
    assert u.finite_check == expected
    ref = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), finite_check="solver")
    set_grads(m, {"fc1/affine/b": np.full(hidden, np.inf, np.float32)})
    assert inspect(u)[:4][1:] == inspect(ref)[:4][1:] == (False, None, ["fc1/affine/b"])


@pytest.mark.parametrize("check", ["numpy", "solver"])
def test_both_check_paths_decide_alike_in_training(check):
    m = make()
    feed = m.feeder(weights={1: SPIKE, 4: SPIKE})
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, feed, scale=2.0**12, N=2, finite_check=check, history=10
    )
    assert u.finite_check == check
    recs = [u.update() for _ in range(6)]
    assert [r.update_applied for r in recs] == [True, False, True, True, False, True]


def test_headroom_policy_gets_the_true_scaled_absmax():
    m = make()
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, m.feeder(), policy=HeadroomScale(init_scale=2.0**4), finite_check="auto"
    )
    assert u.finite_check == "numpy"  # the policy needs |g| max, read in the same pass
    rec = u.update()
    assert rec.grad_absmax > 0
    # next scale: largest power of two keeping (absmax/scale)*margin below 65504
    unscaled = rec.grad_absmax / rec.scale
    assert rec.new_scale == min(2.0**15, 2 ** math.floor(math.log2(65504 / (unscaled * 2.0))))


def test_solver_check_path_measures_absmax_with_nnabla_functions():
    m = make()
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, m.feeder(), policy=HeadroomScale(init_scale=2.0**4), finite_check="numpy"
    )
    a = u.update().grad_absmax
    nn.clear_parameters()
    m2 = make()
    u2 = DynamicLossScalingUpdater(
        m2.solver,
        m2.loss,
        m2.feeder(),
        policy=HeadroomScale(init_scale=2.0**4),
        finite_check="solver",
    )
    assert u2.update().grad_absmax == a


# ---------------------------------------------------------------- clipping and weight decay


def test_clip_grad_norm_bounds_the_global_norm_of_the_unscaled_gradient():
    m = make(type_config="float", solver="sgd", lr=1.0)
    before = param_values(m.params)
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, m.feeder(), scale=2.0**10, clip_grad_norm=1e-3, max_scale=2.0**20
    )
    u.update()
    after = param_values(m.params)
    step = np.concatenate([(before[k] - after[k]).astype(np.float64).ravel() for k in before])
    assert np.linalg.norm(step) == pytest.approx(1e-3, rel=1e-4)


def test_weight_decay_is_applied_to_the_unscaled_gradient():
    lr, wd = 0.5, 0.01
    m = make(type_config="float", solver="sgd", lr=lr)
    feed = m.feeder()
    u = DynamicLossScalingUpdater(m.solver, m.loss, feed, scale=64.0, weight_decay=wd)
    before = param_values(m.params)
    u.update()
    got = param_values(m.params)
    # reference by hand on a second copy
    nn.clear_parameters()
    r = make(type_config="float", solver="sgd", lr=lr)
    r.feeder()()
    r.solver.zero_grad()
    r.loss.forward()
    r.loss.backward(1.0)
    for k, p in r.params.items():
        expected = before[k] - lr * (p.g + wd * before[k])
        np.testing.assert_allclose(got[k], expected, rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------- telemetry and state


def test_history_is_bounded_and_records_are_frozen():
    m = make()
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), history=3)
    for _ in range(5):
        u.update()
    assert [r.step for r in u.history] == [2, 3, 4]
    assert isinstance(u.history[0], StepRecord)
    with pytest.raises(AttributeError):
        u.history[0].scale = 1.0


def test_monitor_writes_scale_and_skip_series(tmp_path):
    m = make()
    feed = m.feeder(weights={1: SPIKE})
    mon = Monitor(str(tmp_path))
    u = DynamicLossScalingUpdater(m.solver, m.loss, feed, scale=2.0**12, monitor=mon)
    for _ in range(3):
        u.update()
    scale_rows = (tmp_path / "loss_scale.series.txt").read_text().split("\n")
    skip_rows = (tmp_path / "skipped_steps.series.txt").read_text().split("\n")
    # the scale each step USED: step 1 overflowed at 4096 (then the scale halved)
    assert [r.split() for r in scale_rows if r] == [["0", "4096"], ["1", "4096"], ["2", "2048"]]
    assert [r.split()[1] for r in skip_rows if r] == ["0", "1", "1"]


def test_state_dict_round_trip_restores_scale_and_counters():
    m = make()
    feed = m.feeder(weights={2: SPIKE})
    u = DynamicLossScalingUpdater(m.solver, m.loss, feed, scale=2.0**12, N=2)
    for _ in range(5):
        u.update()
    sd = u.state_dict()
    assert set(sd) == {"format_version", "policy", "scale_state", "counters"}
    assert set(sd["counters"]) == {
        "steps",
        "updates_applied",
        "overflows",
        "skips",
        "consecutive_nonfinite",
        "batches",
        "passes",
    }
    v = DynamicLossScalingUpdater(m.solver, m.loss, feed)  # defaults: scale 8, N 2000
    v.load_state_dict(sd)
    assert v.state_dict() == sd
    assert v.scale == u.scale and v.policy == u.policy and v.skips == 1
    with pytest.raises(KeyError, match="scale_state"):
        v.load_state_dict({"policy": sd["policy"], "counters": sd["counters"]})


def test_data_feeder_none_means_the_caller_feeds():
    m = make()
    m.feeder()()  # feed once by hand
    u = DynamicLossScalingUpdater(m.solver, m.loss)
    assert u.update().update_applied and u.batches == 0 and u.passes == 1


# ---------------------------------------------------------------- bad input


def _bad_cases():
    # (name, kwargs or callable(model) -> kwargs, exception type, fragments in the message)
    return [
        ("scale=-1", {"scale": -1.0}, ValueError, ["scale", "-1.0", "> 0"]),
        ("scale=nan", {"scale": float("nan")}, ValueError, ["scale", "nan"]),
        ("scale=inf", {"scale": float("inf")}, ValueError, ["scale", "inf"]),
        ("scale='8'", {"scale": "8"}, TypeError, ["scale", "'8'"]),
        ("scale>max", {"scale": 2.0**16}, ValueError, ["scale", "65536", "max_scale"]),
        ("scaling_factor=1", {"scaling_factor": 1.0}, ValueError, ["scaling_factor", "1.0"]),
        ("scaling_factor=0.5", {"scaling_factor": 0.5}, ValueError, ["scaling_factor", "2.0"]),
        ("N=0", {"N": 0}, ValueError, ["N", "0", ">= 1"]),
        ("N=2.5", {"N": 2.5}, ValueError, ["N", "2.5", "whole number"]),
        ("N='2000'", {"N": "2000"}, TypeError, ["N", "'2000'"]),
        ("min_scale tiny", {"min_scale": 2.0**-26, "scale": 1.0}, ValueError, ["2**-24", "0"]),
        ("accum_grad=0", {"accum_grad": 0}, ValueError, ["accum_grad", "0", ">= 1"]),
        ("clear_buffer=1", {"clear_buffer": 1}, TypeError, ["clear_buffer", "1"]),
        ("weight_decay=-1", {"weight_decay": -0.1}, ValueError, ["weight_decay", "-0.1"]),
        ("data_feeder=3", {"data_feeder": 3}, TypeError, ["data_feeder", "3"]),
        ("on_overflow", {"on_overflow": "recurse"}, ValueError, ["on_overflow", "recurse"]),
        ("max_retries=-1", {"max_retries": -1}, ValueError, ["max_retries", "-1"]),
        ("max_consec=0", {"max_consecutive_nonfinite": 0}, ValueError, ["max_consecutive"]),
        ("clip=0", {"clip_grad_norm": 0.0}, ValueError, ["clip_grad_norm", "0.0"]),
        ("history=-1", {"history": -1}, ValueError, ["history", "-1"]),
        ("comm", {"comm": object()}, TypeError, ["comm", "all_reduce"]),
        ("grads", {"grads": [np.zeros(3)]}, TypeError, ["grads", "NdArray"]),
        ("monitor", {"monitor": "dir"}, TypeError, ["monitor", "str"]),
        ("recorder", {"recorder": 5}, TypeError, ["recorder", "int"]),
        ("finite_check", {"finite_check": "fast"}, ValueError, ["finite_check", "fast"]),
        ("min_scale=0", {"min_scale": 0.0}, ValueError, ["min_scale", "0.0"]),
        (
            "policy+scale",
            {"policy": DynamicScale(), "scale": 2.0},
            ValueError,
            ["policy", "scale", "not both"],
        ),
        ("policy=unknown name", {"policy": "dynamik"}, ValueError, ["'dynamik'", "'dynamic'"]),
        ("policy=class", {"policy": DynamicScale}, TypeError, ["class", "pass DynamicScale()"]),
        ("policy=int", {"policy": 3}, TypeError, ["preset name", "make_policy", "int"]),
        ("init_scale", {"init_scale": 1024.0}, TypeError, ["scale=1024.0", "init_scale=1024.0"]),
        (
            "growth_interval",
            {"growth_interval": 100, "growth_factor": 2.0},
            TypeError,
            ["policy=DynamicScale(growth_interval=100, growth_factor=2.0)"],
        ),
        (
            "backoff_factor",
            {"backoff_factor": 0.5},
            TypeError,
            ["DynamicScale(backoff_factor=0.5)"],
        ),
        ("typo", {"acum_grad": 2}, TypeError, ["'acum_grad'", "did you mean 'accum_grad'?"]),
        ("loss non-scalar", "nonscalar_loss", ValueError, ["loss", "scalar", "(8, 3)"]),
        ("loss numpy", "numpy_loss", TypeError, ["loss", "ndarray"]),
        ("solver empty", "empty_solver", ValueError, ["solver has no parameters"]),
    ]


@pytest.mark.parametrize(
    "kwargs,exc,fragments", [c[1:] for c in _bad_cases()], ids=[c[0] for c in _bad_cases()]
)
def test_bad_input_raises_a_clear_error(kwargs, exc, fragments):
    import nnabla.solvers as S

    m = make()
    args = {"solver": m.solver, "loss": m.loss}
    if kwargs == "nonscalar_loss":
        args["loss"] = m.loss.parent.inputs[0].parent.inputs[0].parent.inputs[0]
    elif kwargs == "numpy_loss":
        args["loss"] = np.zeros(())
    elif kwargs == "empty_solver":
        args["solver"] = S.Sgd(0.1)
    else:
        args.update(kwargs)
    with pytest.raises(exc) as info:
        DynamicLossScalingUpdater(**args)
    for fragment in fragments:
        assert fragment in str(info.value)


# ---------------------------------------------------------------- communicator path


def test_single_rank_communicator_path_matches_no_communicator():
    """With one MPI rank the all-reduce and the agreement are identities: same training."""
    pytest.importorskip("mpi4py")
    from updater.runtime.comm import MPICommunicator

    comm = MPICommunicator()
    assert comm.size == 1
    runs = []
    for use_comm in (False, True):
        nn.clear_parameters()
        m = make()
        feed = m.feeder(weights={2: SPIKE})
        u = DynamicLossScalingUpdater(
            m.solver, m.loss, feed, scale=2.0**12, N=2, comm=comm if use_comm else None
        )
        records = [u.update() for _ in range(5)]
        runs.append(([(r.scale, r.update_applied) for r in records], param_values(m.params)))
    assert runs[0][0] == runs[1][0]
    assert [applied for _, applied in runs[1][0]] == [True, True, False, True, True]
    assert_same_values(runs[0][1], runs[1][1])
