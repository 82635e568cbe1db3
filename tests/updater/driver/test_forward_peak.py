"""The float16 forward pass's headroom on recorded steps (GradientRecorder(forward_headroom=True),
updater/driver/forward_peak.py, issue 32 item 3) on real nnabla graphs in cpu:half."""

import nnabla as nn
import nnabla.functions as F
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import cpu_context
from updater import DynamicLossScalingUpdater, DynamicScale, GradientRecorder, Trace

pytestmark = pytest.mark.nnabla


def _bn_model(scope, spread):
    """affine(4) -> BatchNormalization -> mean: the batch variance of the affine's output is
    about ``spread**2`` (its inputs are +-spread, weights 1)."""
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(scope):
        x = nn.Variable.from_numpy_array(
            np.array([[spread], [-spread], [spread / 2], [-spread / 2]], np.float32)
        )
        h = PF.affine(x, 4, w_init=np.ones((1, 4), np.float32), name="fc")
        loss = F.mean(PF.batch_normalization(h, batch_stat=True, name="bn"))
        solver = S.Sgd(0.01)
        solver.set_parameters(nn.get_parameters())
    return solver, loss


def _record(tmp_path, scope, spread, steps=3, headroom=True):
    solver, loss = _bn_model(scope, spread)
    path = tmp_path / f"{scope}.npz"
    recorder = GradientRecorder(path, forward_headroom=headroom)
    upd = DynamicLossScalingUpdater(
        solver, loss, None, policy=DynamicScale(init_scale=8.0), recorder=recorder
    )
    for _ in range(steps):
        upd.update()
    recorder.close()
    params = {k: v.d.copy() for k, v in nn.get_parameters(grad_only=False).items()}
    return Trace.load(path), params


def test_the_batch_variance_near_the_edge_is_recorded_with_its_function(tmp_path):
    trace, _ = _record(tmp_path, "peak_near", 200.0)  # variance 25000: 0.38 of 65504
    assert trace.has_forward
    expected = np.var([200.0, -200.0, 100.0, -100.0]) / 65504
    np.testing.assert_allclose(trace.forward_peak, expected, rtol=1e-3)
    assert trace.forward_where == ("BatchNormalization#1 (batch variance)",) * 3


def test_far_from_the_edge_the_largest_output_is_named(tmp_path):
    # the affine gives 1 at most, the batch variance is 0.625, the normalized output 1 / 0.79
    trace, _ = _record(tmp_path, "peak_far", 1.0, steps=1)
    assert trace.forward_where == ("BatchNormalization#1",)
    np.testing.assert_allclose(trace.forward_peak, 1 / np.sqrt(0.625) / 65504, rtol=1e-2)


def test_measuring_leaves_training_unchanged_and_is_off_by_default(tmp_path):
    measured, params = _record(tmp_path, "peak_on", 200.0)
    plain, plain_params = _record(tmp_path, "peak_off", 200.0, headroom=False)
    assert not plain.has_forward
    for (name, a), b in zip(sorted(params.items()), [v for _, v in sorted(plain_params.items())]):
        np.testing.assert_array_equal(a, b, err_msg=name)
    np.testing.assert_array_equal(measured.counts, plain.counts)
