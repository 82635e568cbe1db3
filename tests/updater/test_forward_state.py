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
from updater.arrays import forward_written

pytestmark = pytest.mark.nnabla
SCOPES = itertools.count()


def _hand_made_bn(weight):
    """affine -> F.batch_normalization with nn.Variable mean/var (not PF) -> affine; the loss
    times ``weight`` (3.0 overflows at 2**15 and not at 2**14 here)."""
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
    """The step overflows at 2**15 and is retried at 2**14: the statistics must equal those of
    one forward pass (before the fix they moved once per attempt)."""
    solver, loss, mean, var = _hand_made_bn(3000.0)
    policy = DynamicScale(init_scale=2.0**15, growth_interval=1000)
    upd = DynamicLossScalingUpdater(solver, loss, None, policy=policy, on_overflow="retry")
    record = upd.update()
    assert record.attempts >= 2
    _, once, mean1, var1 = _hand_made_bn(3000.0)
    once.forward()
    assert np.array_equal(mean.d, mean1.d) and np.array_equal(var.d, var1.d)
