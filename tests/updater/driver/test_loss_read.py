"""The loss read on the host (the "numpy", "nnabla" and "solver" paths): planned once per built
rounds, at the first read, for the loss's size and dtype (:func:`finite_reader`), then one call
per round; an applied step with an inf loss is still counted through it. On real cpu:half
graphs."""

import pytest

from tests.nnabla_models import TinyClassifier
from updater import DynamicLossScalingUpdater
from updater.driver.arrays import host_all_finite

pytestmark = pytest.mark.nnabla


def test_the_loss_read_is_planned_at_the_first_step_and_again_for_a_new_loss():
    m = TinyClassifier("loss_read_plan")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder())
    u.update()
    planned = u._rounds._read_loss
    assert planned is not host_all_finite  # a one-value float16 loss: the word read alone
    assert planned(m.loss.data) is True
    u.update()
    assert u._rounds._read_loss is planned  # planned once
    u.loss = m.loss * 1.0  # a new loss builds new rounds, which plan their own read
    u.update()
    assert u._rounds._read_loss is not planned


def test_an_applied_step_with_an_inf_loss_is_counted_through_the_planned_read():
    """Finite gradients, an inf float16 loss (a mean of large per-sample losses overflows while
    the gradients stay finite): applied, counted in ``nonfinite_losses``."""
    m = TinyClassifier("loss_read_inf", batch=4)
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(weights={2: 6e4}), scale=1.0)
    records = [u.update() for _ in range(4)]
    assert [r.loss_finite for r in records] == [True, True, False, True]
    assert records[2].update_applied and u.nonfinite_losses == 1
