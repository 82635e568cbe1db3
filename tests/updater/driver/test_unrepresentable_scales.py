"""Scales float16 cannot hold as a seed still apply the exact gradient; settings that would seed
zero are refused, on real nnabla graphs."""

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import cpu_context
from updater import DynamicScale, HeadroomScale, NnablaLegacy, StaticScale
from updater.driver.updater import DynamicLossScalingUpdater

pytestmark = pytest.mark.nnabla


def seed_model(type_config="half"):
    """``loss = sum(w * c)`` with c = 1: the gradient of w is exactly 1; Sgd lr 2**-4."""
    with nn.context_scope(cpu_context(type_config)), nn.parameter_scope("seed"):
        c = nn.Variable((4,))
        c.d = 1.0
        w = nn.parameter.get_parameter_or_create("w", (4,), I.ConstantInitializer(0.0))
        loss = F.sum(w * c)
        solver = S.Sgd(2.0**-4)
        solver.set_parameters({"w": w})
    return w, loss, solver


@pytest.mark.parametrize("scale", [2049.0, 1000.1, 17496.0, 3.0])
def test_scales_float16_cannot_hold_still_apply_the_exact_gradient(scale):
    """float16 holds 2049 as 2048, 1000.1 as 1000, 17496 as 17504: unscaling by the scale
    itself applied 0.999512 (not 1) for 2049."""
    w, loss, solver = seed_model()
    u = DynamicLossScalingUpdater(
        solver, loss, policy=StaticScale(scale), finite_check="numpy", max_consecutive_nonfinite=1
    )
    rec = u.update()
    assert rec.update_applied and rec.scale == float(np.float16(scale))
    np.testing.assert_array_equal(w.d, -(2.0**-4))  # lr * exact gradient 1


def test_legacy_factor_3_reaches_unrepresentable_scales_and_stays_exact():
    w, loss, solver = seed_model()
    u = DynamicLossScalingUpdater(solver, loss, scale=8.0, scaling_factor=3.0, N=1, history=9)
    for k in range(8):
        u.update()
        np.testing.assert_array_equal(w.d, -(2.0**-4) * (k + 1))
    scales = [r.scale for r in u.history]
    assert 17504.0 in scales  # 8 * 3**7 = 17496 is held as 17504 by float16


def test_float32_loss_seeds_in_float32():
    w, loss, solver = seed_model("float")
    u = DynamicLossScalingUpdater(solver, loss, policy=StaticScale(1000.1))
    assert u.update().scale == float(np.float32(1000.1))
    np.testing.assert_array_equal(w.d, -(2.0**-4))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"policy": StaticScale(2.0**-25)},
        {"policy": DynamicScale(init_scale=1.0, min_scale=2.0**-26)},
        {"policy": HeadroomScale(init_scale=1.0, min_scale=2.0**-30)},
        {"scale": 1.0, "min_scale": 2.0**-25},
    ],
    ids=["static", "dynamic-floor", "headroom-floor", "legacy-floor"],
)
def test_settings_that_would_seed_zero_are_rejected_saying_why(kwargs):
    w, loss, solver = seed_model()
    with pytest.raises(ValueError, match=r"2\*\*-24.*rounds to 0"):
        DynamicLossScalingUpdater(solver, loss, **kwargs)


def test_a_floorless_policy_that_reaches_a_zero_seed_raises_instead_of_a_silent_zero_step():
    w, loss, solver = seed_model()
    u = DynamicLossScalingUpdater(solver, loss, policy=NnablaLegacy(scale=2.0**-24))
    u._state = u._state._replace(scale=np.float64(2.0**-25))  # where the legacy policy drifts
    with pytest.raises(ValueError, match="rounds to a backward seed of 0"):
        u.update()
    np.testing.assert_array_equal(w.d, 0.0)


# ---------------------------------------------------------------- nnabla's attributes
