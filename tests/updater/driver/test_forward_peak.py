"""The float16 forward pass's headroom on recorded steps (Probes(forward_headroom=True),
updater/driver/recording/forward_peak.py, issue 32 item 3) on real nnabla graphs in cpu:half."""

import nnabla as nn
import nnabla.functions as F
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import cpu_context
from updater import DynamicLossScalingUpdater, DynamicScale, GradientRecorder, Probes, Trace

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
    recorder = GradientRecorder(path)
    probes = Probes(forward_headroom=headroom)
    policy = DynamicScale(init_scale=8.0)
    upd = DynamicLossScalingUpdater(
        solver, loss, None, policy=policy, recorder=recorder, probes=probes
    )
    for _ in range(steps):
        upd.update()
    recorder.close()
    params = {k: v.d.copy() for k, v in nn.get_parameters(grad_only=False).items()}
    return Trace.load(path), params


def test_the_sum_of_squares_near_the_edge_is_recorded_with_its_function(tmp_path, caplog):
    """Issue 39: BatchNormalization's kernel sums x^2 over the channel's N values in float16; the
    batch variance (what was recorded before, 0.1 of 65504 here) is a factor N below it."""
    trace, _ = _record(tmp_path, "peak_near", 100.0)  # sum of x^2: 25000, 0.38 of 65504
    assert trace.has_forward
    expected = (2 * 100.0**2 + 2 * 50.0**2) / 65504
    np.testing.assert_allclose(trace.forward_peak, expected, rtol=1e-3)
    assert trace.forward_where == ("BatchNormalization#1 (sum of x^2)",) * 3
    warned = [r.getMessage() for r in caplog.records if "forward pass" in r.getMessage()]
    assert len(warned) == 1  # once per recorder, at the first step within the factor
    assert "BatchNormalization#1 (sum of x^2)" in warned[0] and "step 0" in warned[0]
    assert "updater.amp.rewrite" in warned[0]


def _bn_forward(scope, base):
    """BatchNormalization (batch statistics) of ``base * c`` in cpu:half, for any ``c``: the
    recorded measure of each forward and whether the running variance went inf."""
    from updater.driver.recording.forward_peak import ForwardPeak

    with nn.context_scope(cpu_context("half")), nn.parameter_scope(scope):
        x = nn.Variable(base.shape)
        y = PF.batch_normalization(x, batch_stat=True, name="bn")
    var = nn.get_parameters(grad_only=False)[f"{scope}/bn/bn/var"]

    def run(c):
        var.d, x.d = 1.0, base * c
        peak = ForwardPeak()
        y.forward(function_post_hook=peak)
        return peak.peak, not np.isfinite(var.d).all()

    return run


def test_the_measure_reaches_1_where_batch_normalization_overflows_and_warns_4x_before():
    """Issue 39: on cpu:half, find the input size at which BatchNormalization's forward makes
    its running variance inf (steps of 2**(1/32)); the recorded measure reaches 1 exactly
    there, and the warning (measure >= 1/4) starts a factor 2 below in x, 4 in x^2."""
    from updater.common.float16 import FORWARD_NEAR_FACTOR as NEAR_FACTOR

    run = _bn_forward("overflow_point", np.random.default_rng(0).standard_normal((16, 2, 4, 4)))
    scales = 2.0 ** (np.arange(0, 6 * 32) / 32)
    seen = [run(c) for c in scales]
    overflow = next(i for i, (_, bad) in enumerate(seen) if bad)
    assert 0 < overflow and not any(bad for _, bad in seen[:overflow])
    assert seen[overflow][0] >= 1.0 and seen[overflow - 1][0] < 1.0
    warns = next(i for i, (p, _) in enumerate(seen) if p >= 1.0 / NEAR_FACTOR)
    assert abs(warns - (overflow - 32)) <= 1  # 32 steps of 2**(1/32): a factor 2 in x


def test_far_from_the_edge_the_largest_output_is_named(tmp_path):
    # the affine gives 0.5 at most, the sum of x^2 is 0.625, the batch variance 0.156, the
    # normalized output 0.5 / 0.395 = 1.26
    trace, _ = _record(tmp_path, "peak_far", 0.5, steps=1)
    assert trace.forward_where == ("BatchNormalization#1",)
    np.testing.assert_allclose(trace.forward_peak, 1 / np.sqrt(0.625) / 65504, rtol=1e-2)


def test_measuring_leaves_training_unchanged_and_is_off_by_default(tmp_path):
    measured, params = _record(tmp_path, "peak_on", 200.0)
    plain, plain_params = _record(tmp_path, "peak_off", 200.0, headroom=False)
    assert not plain.has_forward
    for (name, a), b in zip(sorted(params.items()), [v for _, v in sorted(plain_params.items())]):
        np.testing.assert_array_equal(a, b, err_msg=name)
    np.testing.assert_array_equal(measured.counts, plain.counts)


def test_far_from_the_edge_the_recorder_does_not_warn(tmp_path, caplog):
    trace, _ = _record(tmp_path, "peak_quiet", 40.0, steps=1)  # sum of x^2 4000: 0.06 of 65504
    assert trace.forward_peak[0] < 0.25
    assert not [r for r in caplog.records if "forward pass" in r.getMessage()]


def test_softmax_s_denominator_is_read_along_its_axis():
    """The sum of exp(x - max) along Softmax's axis, 1 / the output at the maximum: a row of
    4 equal values sums to 4; on a 3-d input along axis 1."""
    from updater.driver.recording.forward_peak import ForwardPeak

    x = np.zeros((2, 4, 3), np.float32)
    x[1, :, 0] = [0.0, 0.0, 0.0, 30.0]  # one dominant value: that row sums to about 1
    with nn.context_scope(cpu_context("half")):
        v = nn.Variable.from_numpy_array(x)
        y = F.softmax(v, axis=1)
    peak = ForwardPeak()
    y.forward(function_post_hook=peak)
    assert peak.where == "Softmax#1 (denominator)"
    assert peak.peak == pytest.approx(4 / 65504, rel=1e-3)
