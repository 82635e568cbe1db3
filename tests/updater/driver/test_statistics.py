"""Issue 21, part 3: a running statistic that becomes inf/NaN after a step is reported: a warning
once per statistic naming it and the step, a counter, an option that raises, and a warning from
save_checkpoint. Since issue 48 a step whose forward pass made a statistic inf/NaN is a bad batch
with ``restore_on_skip`` (the default, test_state_made_nonfinite.py), so a statistic stays inf/NaN
only with ``restore_on_skip=False`` (or when it was inf/NaN before the step)."""

import itertools
import logging

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import cpu_context
from updater import DynamicLossScalingUpdater, NonFiniteStatisticsError, save_checkpoint
from updater.driver.arrays import host_reads

pytestmark = pytest.mark.nnabla

_SCOPES = itertools.count()
BIG = 300.0  # a batch scaled by this overflows bn's float16 variance in the forward pass


class BatchNormNet:
    """affine -> BatchNormalization(batch_stat=True) -> affine in cpu:half, Adam; the batches in
    ``big`` are scaled by :data:`BIG`."""

    def __init__(self):
        self.scope = f"bnnet{next(_SCOPES)}"
        with nn.context_scope(cpu_context("half")), nn.parameter_scope(self.scope):
            self.x, self.t = nn.Variable((8, 4)), nn.Variable((8, 1))
            rng = np.random.RandomState(0)
            h = PF.affine(self.x, 8, w_init=I.NormalInitializer(0.1, rng), name="fc1")
            h = PF.batch_normalization(h, batch_stat=True, name="bn")
            y = PF.affine(F.tanh(h), 3, w_init=I.NormalInitializer(0.5, rng), name="fc2")
            self.loss = F.mean(F.softmax_cross_entropy(y, self.t))
            self.params = nn.get_parameters(grad_only=True)
        self.solver = S.Adam(0.01)
        self.solver.set_parameters(self.params)
        self.calls, self.big = 0, set()

    def feed(self):
        rng = np.random.RandomState(self.calls)
        self.x.d = rng.randn(8, 4) * (BIG if self.calls in self.big else 1.0)
        self.t.d = rng.randint(0, 3, (8, 1))
        self.calls += 1

    def var(self):
        return nn.get_parameters(grad_only=False)[f"{self.scope}/bn/bn/var"]


@pytest.mark.parametrize("check", ["numpy", "solver", "nnabla"])
def test_a_statistic_made_inf_by_an_applied_step_is_reported_once(check, caplog):
    net = BatchNormNet()
    net.big = {1, 3}
    u = DynamicLossScalingUpdater(
        net.solver,
        net.loss,
        net.feed,
        finite_check=check,
        on_overflow="retry",
        restore_on_skip=False,
    )
    with caplog.at_level(logging.WARNING, logger="updater.driver.forward_state"):
        records = [u.update() for _ in range(4)]
    assert records[1].update_applied  # the big batch itself trained (its gradients finite)
    assert not np.isfinite(net.var().d).all()  # what the old updater left, silently
    warnings = [r.getMessage() for r in caplog.records if "became inf/NaN" in r.getMessage()]
    assert len(warnings) == 1  # once per statistic, not again at step 3
    assert f"after step 1: {net.scope}/bn/bn/var" in warnings[0]
    assert "updater.amp.rewrite" in warnings[0]
    assert u.nonfinite_statistics == 1


def test_the_device_check_reads_the_statistics_in_its_one_host_read(caplog):
    net = BatchNormNet()
    u = DynamicLossScalingUpdater(
        net.solver, net.loss, net.feed, finite_check="solver", on_overflow="retry"
    )
    u.update()
    reads = host_reads()
    u.update()
    assert host_reads() - reads == 1
    net.big = {net.calls}
    with caplog.at_level(logging.WARNING, logger="updater.driver.forward_state"):
        rec = u.update()
    # its gradients overflow and the forward made the variance inf: a bad batch (issue 37),
    # seen by the same read, the statistics put back
    assert rec.bad_batch and rec.attempts == 1 and np.isfinite(net.var().d).all()


def test_on_nonfinite_statistics_raise_stops_the_script_after_the_step():
    net = BatchNormNet()
    net.big = {1}
    u = DynamicLossScalingUpdater(
        net.solver,
        net.loss,
        net.feed,
        on_overflow="retry",
        on_nonfinite_statistics="raise",
        restore_on_skip=False,
    )
    u.update()
    with pytest.raises(NonFiniteStatisticsError) as info:
        u.update()
    assert info.value.names == [f"{net.scope}/bn/bn/var"] and info.value.step == 1
    assert u.steps == 2 and u.updates_applied == 2  # the step was applied and counted
    with pytest.raises(ValueError, match="on_nonfinite_statistics"):
        DynamicLossScalingUpdater(net.solver, net.loss, on_nonfinite_statistics="ignore")


def test_a_skipped_step_without_restore_is_checked_too(caplog):
    net = BatchNormNet()
    net.big = {1}
    u = DynamicLossScalingUpdater(
        net.solver, net.loss, net.feed, restore_on_skip=False, scale=2.0**15
    )
    u.update()
    with caplog.at_level(logging.WARNING, logger="updater.driver.forward_state"):
        rec = u.update()
    assert not rec.update_applied and u.nonfinite_statistics == 1


def test_save_checkpoint_warns_about_inf_statistics(tmp_path, caplog):
    net = BatchNormNet()
    net.big = {1}
    u = DynamicLossScalingUpdater(
        net.solver, net.loss, net.feed, on_overflow="retry", restore_on_skip=False
    )
    u.update()
    u.update()
    with caplog.at_level(logging.WARNING, logger="updater.runtime.checkpoint"):
        save_checkpoint(tmp_path / "run.npz", u)
    assert f"{net.scope}/bn/bn/var (inf)" in caplog.text and "allow_nonfinite=True" in caplog.text
