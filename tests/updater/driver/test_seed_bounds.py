"""Scale bounds follow the backward seed's precision (issue 23, item 6), on real cpu:half
graphs: a loss whose last function computes in float32 seeds in float32."""

import itertools

import nnabla as nn
import nnabla.functions as F
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import cpu_context
from updater import DynamicLossScalingUpdater, DynamicScale, StaticScale

pytestmark = pytest.mark.nnabla
SCOPES = itertools.count()


def _model(float_loss: bool):
    """An affine layer in half; the loss's Mean in float32 (``float_loss``) or in half."""
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(f"seed_{next(SCOPES)}"):
        x = nn.Variable.from_numpy_array(np.full((4, 3), 0.01, np.float32))
        h = PF.affine(x, 2)
        with nn.context_scope(cpu_context("float" if float_loss else "half")):
            loss = F.mean(h) * 2.0**-10  # float16 gradients stay finite at seed 2**20
        solver = S.Sgd(0.0)
        solver.set_parameters(nn.get_parameters())
    return solver, loss


def test_a_float32_loss_takes_nnabla_style_scales_above_2_15():
    """nnabla's updater accepts scale=2**20 for a float32 loss; so does ours now (it was
    refused: the default cap was 2**15 whatever the seed)."""
    solver, loss = _model(float_loss=True)
    upd = DynamicLossScalingUpdater(solver, loss, None, scale=2.0**20)
    assert upd.policy.max_scale == 2.0**127
    record = upd.update()
    assert record.scale == 2.0**20 and record.update_applied


def test_a_half_loss_gets_the_float16_cap_by_default():
    solver, loss = _model(float_loss=False)
    assert DynamicLossScalingUpdater(solver, loss, None, N=100).policy.max_scale == 2.0**15


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_scale": 2.0**16},  # was accepted, then seeded inf
        {"scale": 2.0**16, "max_scale": 2.0**16},
        {"policy": DynamicScale(init_scale=2.0**15, max_scale=2.0**17)},
        {"policy": StaticScale(70000.0)},
    ],
)
def test_a_half_loss_refuses_a_bound_its_seed_cannot_hold(kwargs):
    solver, loss = _model(float_loss=False)
    with pytest.raises(ValueError, match=r"65504.0, the largest backward seed a float16 loss"):
        DynamicLossScalingUpdater(solver, loss, None, **kwargs)


def test_a_checkpointed_policy_above_the_seed_is_refused_and_changes_nothing():
    solver, loss = _model(float_loss=False)
    upd = DynamicLossScalingUpdater(solver, loss, None)
    state = upd.state_dict()
    state["policy"]["max_scale"] = 2.0**20
    with pytest.raises(ValueError, match="max_scale"):
        upd.load_state_dict(state)
    assert upd.policy.max_scale == 2.0**15
