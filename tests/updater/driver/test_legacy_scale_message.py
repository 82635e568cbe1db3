"""nnabla's ``scale=65504`` on a half loss (issue 41): refused because of the default
``max_scale`` (2**15), and the message says so and names the fix, which then trains; it no
longer says "scales above 65504" of a scale that is not above it."""

import nnabla as nn
import nnabla.functions as F
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import cpu_context
from updater import DynamicLossScalingUpdater

pytestmark = pytest.mark.nnabla


def _half_model(scope):
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(scope):
        x = nn.Variable.from_numpy_array(np.full((4, 3), 0.01, np.float32))
        loss = F.mean(PF.affine(x, 2)) * 2.0**-10
        solver = S.Sgd(0.0)
        solver.set_parameters(nn.get_parameters())
    return solver, loss


def test_scale_65504_names_max_scale_not_above_65504():
    solver, loss = _half_model("legacy_65504_refused")
    with pytest.raises(ValueError) as error:
        DynamicLossScalingUpdater(solver, loss, None, scale=65504)
    message = str(error.value)
    assert message == (
        "scale must be in [min_scale, max_scale] = [1.0, 32768.0], got 65504; pass "
        "max_scale=65504 to allow it (a loss computed in half takes scales up to 65504: its "
        "backward seed is float16)"
    )


def test_the_named_fix_trains_at_65504():
    solver, loss = _half_model("legacy_65504_fixed")
    with nn.context_scope(cpu_context("half")):
        upd = DynamicLossScalingUpdater(solver, loss, None, scale=65504, max_scale=65504)
        record = upd.update()
    assert record.scale == 65504 and record.update_applied


def test_a_scale_below_min_scale_names_min_scale():
    solver, loss = _half_model("legacy_below")
    with pytest.raises(ValueError, match=r"got 0.5; pass min_scale=0.5 to allow it$"):
        DynamicLossScalingUpdater(solver, loss, None, scale=0.5)
