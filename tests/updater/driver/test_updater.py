"""The nnabla driver on real tiny graphs in cpu:half: skips, retries, growth, NaN, validation."""

import nnabla as nn
import numpy as np
import pytest
from nnabla.experimental.mixed_precision_training import (
    DynamicLossScalingUpdater as NnablaUpdater,
)
from nnabla.monitor import Monitor

from tests.nnabla_models import (
    TinyClassifier,
    assert_same_values,
    param_values,
    solver_state_values,
)
from updater import DynamicScale, StaticScale
from updater.driver.updater import (
    DynamicLossScalingUpdater,
    NonFiniteGradientsError,
    StepRecord,
)

pytestmark = pytest.mark.nnabla

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
