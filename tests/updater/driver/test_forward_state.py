"""State a forward pass writes, found from the graph (issue 23, item 4), on real cpu:half
graphs: running statistics made by hand move once per batch under retry, as registered ones do."""

import itertools

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import cpu_context
from updater import DynamicLossScalingUpdater, DynamicScale
from updater.driver.written import forward_written

pytestmark = pytest.mark.nnabla
SCOPES = itertools.count()


def _hand_made_bn(weight):
    """affine -> F.batch_normalization with nn.Variable mean/var (not PF) -> affine; the loss
    times ``weight`` (30 overflows from 2**15 down to 2**9 and is finite at 2**8)."""
    rng = np.random.RandomState(0)
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(f"hand_bn_{next(SCOPES)}"):
        x = nn.Variable.from_numpy_array(rng.randn(8, 4).astype(np.float32))
        h = PF.affine(x, 6, w_init=I.NormalInitializer(0.5, rng=rng), name="fc1")
        beta = nn.Variable.from_numpy_array(np.zeros((1, 6), np.float32))
        gamma = nn.Variable.from_numpy_array(np.ones((1, 6), np.float32))
        mean = nn.Variable.from_numpy_array(np.zeros((1, 6), np.float32))
        var = nn.Variable.from_numpy_array(np.ones((1, 6), np.float32))
        h = F.batch_normalization(h, beta, gamma, mean, var, batch_stat=True)
        y = PF.affine(F.tanh(h), 1, w_init=I.NormalInitializer(0.5, rng=rng), name="fc2")
        loss = F.sum(y) * weight
        solver = S.Sgd(0.0)
        solver.set_parameters(nn.get_parameters())
    return solver, loss, mean, var


def test_the_graph_names_the_hand_made_statistics():
    _, loss, mean, var = _hand_made_bn(1.0)
    assert {hash(v) for v in forward_written(loss)} == {hash(mean), hash(var)}


def test_a_retried_batch_moves_hand_made_statistics_once():
    """The step overflows at 2**15 and is retried down to 2**8: the statistics must equal those
    of one forward pass (before the fix they moved once per attempt)."""
    solver, loss, mean, var = _hand_made_bn(30.0)
    policy = DynamicScale(init_scale=2.0**15, growth_interval=1000)
    upd = DynamicLossScalingUpdater(solver, loss, None, policy=policy, on_overflow="retry")
    record = upd.update()
    assert record.attempts == 8 and record.update_applied  # finite at 2**8
    _, once, mean1, var1 = _hand_made_bn(30.0)
    once.forward()
    assert np.array_equal(mean.d, mean1.d) and np.array_equal(var.d, var1.d)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"accum_grad": 2}, {"on_overflow": "retry", "max_retries": 1}, {"restore_on_skip": False}],
)
def test_a_skipped_step_leaves_parameters_solver_and_statistics_as_they_were(kwargs):
    """Issue 21: a batch scaled by 300 overflows at every scale tried and is skipped; its
    forward pass must not stay in BatchNormalization's running statistics (with
    restore_on_skip=False, nnabla's behaviour, it does)."""
    from tests.nnabla_models import (
        TinyBNClassifier,
        assert_same_values,
        param_values,
        solver_state_values,
    )

    model = TinyBNClassifier(f"skip_restore_{next(SCOPES)}", solver="adam")
    calls = 2 if kwargs.get("accum_grad") == 2 else 1
    feed = model.feeder(weights={k: 3e4 for k in range(calls, 40)})
    policy = DynamicScale(init_scale=2.0**10, growth_interval=1000)
    upd = DynamicLossScalingUpdater(model.solver, model.loss, feed, policy=policy, **kwargs)
    assert upd.update().update_applied  # a clean step first
    params, states = param_values(model.params), solver_state_values(model.solver)
    record = upd.update()
    assert not record.update_applied
    if kwargs.get("restore_on_skip", True):
        assert_same_values(param_values(model.params), params)  # running statistics included
        assert_same_values(solver_state_values(model.solver), states)
    else:
        stats = [k for k in params if "bn1/bn/mean" in k or "bn1/bn/var" in k]
        assert stats and not all(
            np.array_equal(param_values(model.params)[k], params[k]) for k in stats
        )
