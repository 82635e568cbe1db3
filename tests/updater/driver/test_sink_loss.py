"""A loss whose backward ignores the seed (F.sink) is refused (issue 23, item 1), on real
cpu:half graphs: with it, unscaling divided gradients that were never scaled."""

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import cpu_context
from updater import DynamicLossScalingUpdater

pytestmark = pytest.mark.nnabla


def _two_losses(scope):
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(scope):
        x = nn.Variable.from_numpy_array(np.full((4, 3), 0.5, np.float32))
        h = PF.affine(x, 2, w_init=I.NormalInitializer(0.5, rng=np.random.RandomState(0)))
        l1, l2 = F.mean(h), F.mean(h**2)
        solver = S.Adam(0.01)
        solver.set_parameters(nn.get_parameters())
    return solver, l1, l2


def test_a_sink_loss_is_refused_naming_the_fix():
    solver, l1, l2 = _two_losses("sink_refused")
    with nn.context_scope(cpu_context("half")):
        loss = F.sink(l1, l2)
    with pytest.raises(ValueError, match=r"F\.sink.*ignores the seed.*loss = l1 \+ l2"):
        DynamicLossScalingUpdater(solver, loss, None)


def test_the_sum_the_message_suggests_trains_with_scaled_gradients():
    """Control: l1 + l2 is seeded and unscaled exactly (the same step at two scales)."""
    steps = []
    for scale in (2.0**4, 2.0**10):
        solver, l1, l2 = _two_losses(f"sink_sum_{int(scale)}")
        with nn.context_scope(cpu_context("half")):
            loss = l1 + l2
        upd = DynamicLossScalingUpdater(solver, loss, None, scale=scale)
        upd.backward()
        upd.unscale()
        steps.append({k: p.g.copy() for k, p in solver.get_parameters().items()})
    for name in steps[0]:
        assert np.allclose(steps[0][name], steps[1][name], rtol=1e-3), name
