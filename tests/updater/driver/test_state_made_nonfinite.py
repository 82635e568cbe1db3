"""Issue 48, finding 8: a forward pass that makes state inf/NaN from a batch in range is a bad
batch whatever the gradients are. nnabla's cpu:half BatchNormalization sums x**2 over a channel's
N values in float16: a batch of fc1 outputs near 100 makes the running variance inf while the
normalized output, the loss and every gradient stay finite. Before the fix the step was applied
and the variance stayed inf for the rest of training; now it is skipped, the state put back bit
for bit, the scale kept, logged once with the remedy, on every finite_check path; with
``restore_on_skip=False`` it is applied and reported, as before."""

import itertools
import logging

import nnabla as nn
import numpy as np
import pytest

from tests.nnabla_models import TinyBNClassifier, assert_same_values, param_values
from updater import (
    DynamicLossScalingUpdater,
    DynamicScale,
    NonFiniteGradientsError,
    NonFiniteStatisticsError,
)
from updater.driver.checks import PATHS

pytestmark = pytest.mark.nnabla
SCOPES = itertools.count()
CHECKS = [*PATHS, "auto"]
SEED = 2.0**10  # the scale of every step: no overflow in these runs
SHIFT = 100.0  # x + SHIFT: fc1's outputs near 100, in range; 8 of them squared overflow float16
SHIFTED = 3  # the feeder call whose batch is shifted


class Run:
    """A TinyBNClassifier (affine -> BatchNormalization -> tanh -> affine, cpu:half, momentum)
    and its data: call k feeds batch k; the calls in ``shifted`` add :data:`SHIFT` to x."""

    def __init__(self, shifted=()):
        self.model = TinyBNClassifier(f"made_inf_{next(SCOPES)}")
        self.shifted = set(shifted)
        self.calls = 0

    def feed(self):
        rng = np.random.RandomState(self.calls)
        m = self.model
        m.x.d = rng.randn(8, 4) + (SHIFT if self.calls in self.shifted else 0.0)
        m.t.d = rng.randint(0, 3, (8, 1))
        self.calls += 1

    def state(self):
        """The running mean and variance, as nnabla's parameter registry names them."""
        everything = nn.get_parameters(grad_only=False)
        scope = self.model.scope
        return [everything[f"{scope}/bn1/bn/mean"], everything[f"{scope}/bn1/bn/var"]]

    def variance(self):
        return self.state()[1].d.copy()

    def updater(self, **kwargs):
        policy = DynamicScale(init_scale=SEED, growth_interval=1000)
        return DynamicLossScalingUpdater(
            self.model.solver, self.model.loss, self.feed, policy=policy, **kwargs
        )

    def plain_step(self):
        """One step of nnabla's own loop at SEED; whether every gradient was finite."""
        m = self.model
        self.feed()
        m.solver.zero_grad()
        m.loss.forward()
        m.loss.backward(SEED)
        finite = all(np.isfinite(p.g).all() for p in m.params.values() if p.need_grad)
        m.solver.scale_grad(1.0 / SEED)
        m.solver.update()
        return finite


def plain_run(steps, skipped=()):
    """nnabla's own loop over the same batches, every step applied but the ``skipped`` ones
    (their batch fed and never run): what the updater must equal."""
    run = Run(shifted=[SHIFTED])
    for k in range(steps):
        if k in skipped:
            run.feed()
        else:
            assert run.plain_step()
    return param_values(run.model.params)


def test_in_plain_nnabla_the_batch_makes_the_variance_inf_with_finite_gradients():
    """The premise, and the old behaviour: nnabla's loop applies the step (its loss and every
    gradient are finite) and the running variance stays inf for the rest of training."""
    run = Run(shifted=[SHIFTED])
    for _ in range(SHIFTED):
        assert run.plain_step() and np.isfinite(run.variance()).all()
    assert run.plain_step()  # the shifted batch: every gradient finite
    assert np.isfinite(run.model.loss.d).all()
    assert np.isinf(run.variance()).any()
    for _ in range(3):
        assert run.plain_step() and np.isinf(run.variance()).any()  # for good


@pytest.mark.parametrize("check", CHECKS)
def test_the_batch_is_bad_the_state_put_back_and_training_goes_on(check, caplog):
    run = Run(shifted=[SHIFTED])
    upd = run.updater(finite_check=check)
    records = [upd.update() for _ in range(SHIFTED)]
    state = [v.d.copy() for v in run.state()]
    with caplog.at_level(logging.WARNING, logger="updater.driver.attempts"):
        record = upd.update()
    assert record.bad_batch and not record.update_applied and record.attempts == 1
    assert record.loss_finite and record.scale == record.new_scale == upd.scale == SEED
    for v, before in zip(run.state(), state):  # bit for bit, float16 or float32
        assert v.d.dtype == before.dtype and np.array_equal(
            v.d.view(np.uint8), before.view(np.uint8)
        )
    records += [record] + [upd.update() for _ in range(3)]
    assert [r.update_applied for r in records] == [True, True, True, False, True, True, True]
    assert np.isfinite(run.variance()).all() and upd.nonfinite_statistics == 0
    assert_same_values(param_values(run.model.params), plain_run(7, skipped=[SHIFTED]))
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(logged) == 1 and f"{run.model.scope}/bn1/bn/var" in logged[0]
    assert "updater.amp.rewrite" in logged[0] and "whatever its gradients" in logged[0]


@pytest.mark.parametrize("check", CHECKS)
def test_ordinary_batches_are_applied_as_nnabla_applies_them(check):
    """The legitimate case: the same model and batches without the shifted one train exactly
    as nnabla's loop (every step applied, nothing bad, the same bits)."""
    run = Run()
    upd = run.updater(finite_check=check)
    records = [upd.update() for _ in range(6)]
    assert all(r.update_applied and not r.bad_batch for r in records)
    plain = Run()
    for _ in range(6):
        assert plain.plain_step()
    assert_same_values(param_values(run.model.params), param_values(plain.model.params))


@pytest.mark.parametrize("kwargs", [{"accum_grad": 2}, {"on_overflow": "retry"}])
def test_with_accumulation_and_retries_too(kwargs):
    """The shifted batch in the second round of an accumulating step; and a retrying updater,
    which never retries a bad batch."""
    run = Run(shifted=[2 * SHIFTED + 1 if "accum_grad" in kwargs else SHIFTED])
    upd = run.updater(**kwargs)
    records = [upd.update() for _ in range(SHIFTED)]
    variance = run.variance()
    record = upd.update()
    assert record.bad_batch and record.attempts == 1 and record.new_scale == SEED
    assert np.array_equal(run.variance(), variance)
    records += [upd.update() for _ in range(2)]
    assert all(r.update_applied for r in records) and np.isfinite(run.variance()).all()


@pytest.mark.parametrize("check", CHECKS)
def test_without_restore_on_skip_the_step_is_applied_and_reported_as_before(check, caplog):
    run = Run(shifted=[SHIFTED])
    upd = run.updater(finite_check=check, restore_on_skip=False)
    with caplog.at_level(logging.WARNING):
        records = [upd.update() for _ in range(SHIFTED + 3)]
    assert all(r.update_applied and not r.bad_batch for r in records)
    assert np.isinf(run.variance()).any() and upd.nonfinite_statistics == 1
    assert_same_values(param_values(run.model.params), plain_run(SHIFTED + 3))
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(logged) == 1 and f"became inf/NaN after step {SHIFTED}" in logged[0]


def test_without_restore_on_skip_raise_stops_after_the_applied_step():
    run = Run(shifted=[SHIFTED])
    upd = run.updater(restore_on_skip=False, on_nonfinite_statistics="raise")
    for _ in range(SHIFTED):
        upd.update()
    with pytest.raises(NonFiniteStatisticsError) as info:
        upd.update()
    assert info.value.step == SHIFTED and upd.updates_applied == SHIFTED + 1


@pytest.mark.parametrize("check", CHECKS)
def test_state_inf_before_the_step_does_not_make_every_batch_bad(check, caplog):
    """A variance already inf (set by hand here, as a checkpoint loaded with
    allow_nonfinite=True leaves it) is not made inf by the batches that follow: they are
    applied, and it is reported once. A batch that makes another value inf is still bad."""
    run = Run(shifted=[SHIFTED])
    variance = run.state()[1]
    values = variance.d.copy()
    values[0, 1] = np.inf  # a channel the shifted batch leaves finite
    variance.d = values
    upd = run.updater(finite_check=check)
    with caplog.at_level(logging.WARNING):
        records = [upd.update() for _ in range(SHIFTED + 3)]
    assert [r.bad_batch for r in records] == [i == SHIFTED for i in range(SHIFTED + 3)]
    assert all(r.update_applied for r in records if not r.bad_batch)
    assert upd.nonfinite_statistics == 1 and np.isinf(run.variance()).sum() == 1
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert sum("became inf/NaN after step 0" in m for m in messages) == 1
    assert sum("whatever its gradients" in m for m in messages) == 1


def test_a_model_whose_every_batch_makes_the_state_inf_stops_naming_the_cause():
    run = Run(shifted=range(100))
    upd = run.updater(max_consecutive_nonfinite=3)
    with pytest.raises(NonFiniteGradientsError) as info:
        for _ in range(3):
            upd.update()
    assert "state its forward pass made inf/NaN" in str(info.value)
    assert "updater.amp.rewrite" in str(info.value) and upd.scale == SEED
    assert np.isfinite(run.variance()).all()


def test_a_recorded_run_marks_the_batch_bad_and_its_replay_keeps_the_scale(tmp_path):
    """The recorder gets the step as a bad batch (skipped at every scale in a replay), though
    its gradients were finite."""
    from sim.replay.run import simulate
    from updater import GradientRecorder, Trace

    run = Run(shifted=[SHIFTED])
    policy = DynamicScale(init_scale=SEED, growth_interval=2)
    with GradientRecorder(tmp_path / "state.npz") as recorder:
        upd = DynamicLossScalingUpdater(
            run.model.solver, run.model.loss, run.feed, policy=policy, recorder=recorder
        )
        records = [upd.update() for _ in range(SHIFTED + 3)]
    trace = Trace.load(tmp_path / "state.npz")
    assert trace.nonfinite.tolist() == [k == SHIFTED for k in range(SHIFTED + 3)]
    replay = simulate(policy, trace, runs=1, jitter=0.0)
    assert replay.scale[:, 0].tolist() == [r.scale for r in records]
    assert records[SHIFTED].new_scale == records[SHIFTED].scale
