"""Where the loss is read on the host (the "numpy", "nnabla" and "solver" paths): one round's
loss when the step's facts ask for it, after the gradients' check (Python right after a backward
pass runs slower: docs/performance.md), several rounds' each as it runs; rounds that count
nothing (a probe's) read an attempt's unread loss before they overwrite it. On real cpu:half
graphs."""

import numpy as np
import pytest

from tests.nnabla_models import TinyClassifier
from updater import DynamicLossScalingUpdater

pytestmark = pytest.mark.nnabla


@pytest.mark.parametrize("accum_grad", [1, 2])
def test_one_round_s_loss_is_read_when_asked_several_rounds_each_as_it_runs(accum_grad):
    m = TinyClassifier(f"loss_read_asked{accum_grad}")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), accum_grad=accum_grad)
    u.update()
    u._rounds.run(8.0)
    m.loss.d = np.inf  # after the rounds: one round's read sees it, several rounds' do not
    assert u._rounds.host_loss_finite() is (accum_grad > 1)
    assert u._rounds.host_loss_finite() is (accum_grad > 1)  # read once


def test_rounds_that_count_nothing_read_the_attempt_s_loss_before_overwriting_it():
    m = TinyClassifier("loss_read_probe")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(nan_calls=(1,)))
    u.update()  # batch 0
    u._rounds.run(8.0)  # batch 1, a NaN input: the attempt's loss is NaN
    u._rounds.run(8.0, count=False)  # a probe's rounds on batch 2, finite
    assert np.isfinite(m.loss.d).all()
    assert u._rounds.host_loss_finite() is False


def test_an_applied_step_with_an_inf_loss_is_counted_on_the_nnabla_path():
    """The deferred read still reaches the record: finite gradients, an inf loss (a float16
    mean of large per-sample losses overflows while the gradients stay finite)."""
    m = TinyClassifier("loss_read_inf", batch=4)
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(weights={1: 6e4}), scale=1.0)
    records = [u.update() for _ in range(3)]
    assert [r.loss_finite for r in records] == [True, False, True]
    assert records[1].update_applied and u.nonfinite_losses == 1
