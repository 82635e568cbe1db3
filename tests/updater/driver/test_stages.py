"""The iteration in stages (backward / unscale / step), schedules that count applied updates,
and ``enabled=False``, on real nnabla graphs."""

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import (
    TinyClassifier,
    assert_same_values,
    cpu_context,
    iterate,
    param_values,
)
from updater import DynamicScale
from updater.driver.checks import Ask, FiniteCheck
from updater.driver.updater import DynamicLossScalingUpdater
from updater.runtime.checkpoint import load_checkpoint, save_checkpoint

pytestmark = pytest.mark.nnabla

SPIKES = {2: 1e3, 5: 1e3, 6: 1e3}  # loss weights that overflow at the scales used here


def run(staged, on_overflow, steps=9, **kwargs):
    nn.clear_parameters()
    m = TinyClassifier("st", solver="adam", lr=0.01)
    policy = DynamicScale(init_scale=2.0**12, growth_interval=3, hysteresis=1)
    u = DynamicLossScalingUpdater(
        m.solver,
        m.loss,
        m.feeder(weights=SPIKES),
        policy=policy,
        on_overflow=on_overflow,
        accum_grad=2,
        **kwargs,
    )
    return iterate(u, steps, staged), param_values(m.params)


@pytest.mark.parametrize("finite_check", ["auto", "nnabla"])
@pytest.mark.parametrize("on_overflow", ["skip", "retry"])
def test_update_is_exactly_backward_unscale_step(on_overflow, finite_check):
    """update() unscales in its check ("numpy": the fused pass; "nnabla": ``scale_grad`` right
    after ``check_inf_or_nan_grad``), the stages in unscale(): the same records and values."""
    kwargs = dict(clip_grad_norm=0.5, weight_decay=1e-3, finite_check=finite_check)
    one_call = run(False, on_overflow, **kwargs)
    staged = run(True, on_overflow, **kwargs)
    assert one_call[0] == staged[0]
    assert not all(r.update_applied for r in staged[0]) or on_overflow == "retry"
    assert any(r.attempts > 1 for r in staged[0]) == (on_overflow == "retry")
    assert_same_values(one_call[1], staged[1])


def test_misuse_raises_saying_what_was_expected():
    m = TinyClassifier("mis")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder())
    with pytest.raises(RuntimeError, match=r"step\(\) needs the gradients of backward"):
        u.step()
    with pytest.raises(RuntimeError, match=r"unscale\(\) needs .* call backward\(\) first"):
        u.unscale()
    u.backward()
    with pytest.raises(RuntimeError, match=r"backward\(\) was called again before step\(\)"):
        u.backward()
    u.step()
    with pytest.raises(RuntimeError, match="call backward"):
        u.unscale()
    assert u.steps == 1 and u.updates_applied == 1


def seed_model(type_config="half", lr=2.0**-4):
    """``loss = sum(w * c)``: the true gradient of w is exactly c."""
    with nn.context_scope(cpu_context(type_config)), nn.parameter_scope("stg"):
        c = nn.Variable((4,))
        c.d = [1.0, 0.5, -1.5, 0.25]  # times 2**15 stays below 65504
        w = nn.parameter.get_parameter_or_create("w", (4,), I.ConstantInitializer(0.0))
        loss = F.sum(w * c)
        solver = S.Sgd(lr)
        solver.set_parameters({"w": w})
    return w, c, loss, solver


def test_after_unscale_the_gradients_hold_their_true_values_and_a_second_call_does_nothing():
    w, c, loss, solver = seed_model()
    u = DynamicLossScalingUpdater(solver, loss)  # DynamicScale(): seed 2**15
    assert u.backward() is True
    np.testing.assert_array_equal(w.g, c.d * 2.0**15)  # still scaled
    u.unscale()
    np.testing.assert_array_equal(w.g, c.d)  # true gradients, e.g. for logging
    u.unscale()
    np.testing.assert_array_equal(w.g, c.d)
    assert u.step().update_applied


@pytest.mark.parametrize("finite", [True, False])
def test_the_nnabla_check_asked_to_unscale_does_so_at_once_only_when_finite(finite):
    """The "nnabla" path fuses update()'s unscaling into its check: asked with ``unscale_by``,
    ``scale_grad`` runs right after ``check_inf_or_nan_grad`` on finite gradients (which then
    hold their true values, marked unscaled); non-finite ones stay as they are, for a retry."""
    w, c, loss, solver = seed_model()
    u = DynamicLossScalingUpdater(solver, loss, finite_check="nnabla")
    u.backward()
    if not finite:
        w.g = np.array([1.0, np.inf, 0.0, 2.0])
    scaled = w.g.copy()
    found = u._work.check.inspect(u._work.params, Ask(False, unscale_by=2.0**-15))
    assert found.finite is finite and found.unscaled is finite
    np.testing.assert_array_equal(w.g, c.d if finite else scaled)
    unasked = u._work.check.inspect(u._work.params, Ask(False))  # the stages' check
    assert not unasked.unscaled
    np.testing.assert_array_equal(w.g, c.d if finite else scaled)


def test_gradients_edited_between_unscale_and_step_are_applied_as_edited():
    w, c, loss, solver = seed_model()
    u = DynamicLossScalingUpdater(solver, loss)
    u.backward()
    u.unscale()
    w.g = np.array([3.0, -1.0, 0.0, 8.0])  # e.g. a penalty, noise, or freezing w[2]
    u.step()
    np.testing.assert_array_equal(w.d, -(2.0**-4) * np.array([3.0, -1.0, 0.0, 8.0]))


def test_per_parameter_clipping_with_nnabla_between_unscale_and_step():
    """nnabla's own solver.clip_grad_by_norm (per parameter) on the true gradients."""
    runs = []
    for staged in (True, False):
        nn.clear_parameters()
        m = TinyClassifier("clip", type_config="float", solver="sgd", lr=0.5)
        feed = m.feeder()
        if staged:
            u = DynamicLossScalingUpdater(m.solver, m.loss, feed, scale=2.0**10, max_scale=2**20)
            for _ in range(3):
                u.backward()
                u.unscale()
                m.solver.clip_grad_by_norm(0.01)
                u.step()
        else:  # by hand, in float32 without scaling
            for _ in range(3):
                m.solver.zero_grad()
                feed()
                m.loss.forward()
                m.loss.backward()
                m.solver.clip_grad_by_norm(0.01)
                m.solver.update()
        runs.append(param_values(m.params))
    for name in runs[0]:
        np.testing.assert_allclose(runs[0][name], runs[1][name], rtol=1e-5, atol=1e-7)
    moved = {k: np.abs(v).max() for k, v in runs[0].items()}
    assert all(v > 0 for v in moved.values())


def test_retry_happens_inside_backward():
    m = TinyClassifier("rt")
    u = DynamicLossScalingUpdater(
        m.solver,
        m.loss,
        m.feeder(weights={0: 1e3}),
        on_overflow="retry",
        policy=DynamicScale(init_scale=2.0**12, hysteresis=1),
    )
    assert u.backward() is True  # after the retries at lower scales
    record = u.step()
    assert record.attempts > 1 and record.update_applied and record.scale < 2.0**12


# ---------------------------------------------------------------- schedules


def test_a_schedule_driven_by_updates_applied_stays_in_step_across_skips_and_a_resume(tmp_path):
    """The learning rate of applied update k is schedule(k): skipped steps do not advance it,
    and a checkpoint resume continues it. Adam's bias-correction counter t moves in step."""

    from nnabla.utils.learning_rate_scheduler import StepScheduler

    schedule = StepScheduler(0.01, 0.5, [3, 6]).get_learning_rate  # nnabla's own scheduler

    def build():
        nn.clear_parameters()
        m = TinyClassifier("sch", solver="adam", lr=schedule(0))
        policy = DynamicScale(init_scale=2.0**12, growth_interval=4, hysteresis=1)
        feed = m.feeder(weights=SPIKES)
        return m, feed, DynamicLossScalingUpdater(m.solver, m.loss, feed, policy=policy)

    def train(m, u, steps, seen):
        for _ in range(steps):
            m.solver.set_learning_rate(schedule(u.updates_applied))
            rate = m.solver.learning_rate()
            if u.update().update_applied:
                seen.append(rate)
            ts = {st.t for st in m.solver.get_states().values()}
            assert ts == {u.updates_applied}  # Adam's t counts applied updates only

    m, feed, u = build()
    full = []
    train(m, u, 10, full)
    assert u.skips == 3 and len(full) == 7
    np.testing.assert_allclose(full, [schedule(k) for k in range(7)], rtol=1e-6)

    m, feed, u = build()
    resumed = []
    train(m, u, 4, resumed)
    path = save_checkpoint(tmp_path / "s.ckpt", u)
    m, feed, u = build()
    load_checkpoint(path, u)
    feed.calls = u.batches
    train(m, u, 6, resumed)
    np.testing.assert_allclose(resumed, full, rtol=1e-6)


# ---------------------------------------------------------------- enabled=False


def test_disabled_trains_exactly_like_a_plain_float32_loop_and_runs_no_check(monkeypatch):
    def no_check(*args, **kwargs):
        raise AssertionError("the finite check ran")

    monkeypatch.setattr(FiniteCheck, "inspect", no_check)
    runs = []
    for disabled in (True, False):
        nn.clear_parameters()
        m = TinyClassifier("off", type_config="float", solver="momentum")
        feed = m.feeder()
        if disabled:
            u = DynamicLossScalingUpdater(m.solver, m.loss, feed, enabled=False, history=5)
            records = [u.update() for _ in range(5)]
        else:
            for _ in range(5):
                m.solver.zero_grad()
                feed()
                m.loss.forward(clear_no_need_grad=True)
                m.loss.backward(clear_buffer=True)
                m.solver.update()
        runs.append(param_values(m.params))
    assert_same_values(*runs)
    assert [(r.scale, r.new_scale, r.update_applied) for r in records] == [(1.0, 1.0, True)] * 5
    assert u.scale == 1.0 and u.updates_applied == 5
