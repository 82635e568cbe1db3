"""Issue 28, part 2: every input an nnabla function's step writes (updater.driver.function_roles'
audit) is put back by a skipped step, on real cpu:half graphs, one test per function; the written
inputs are resolved by role (BatchNormalization's no_scale / no_bias move the statistics)."""

import itertools
import logging

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import cpu_context
from updater import DynamicLossScalingUpdater, DynamicScale

pytestmark = pytest.mark.nnabla
SCOPES = itertools.count()
SPIKE = 1000.0  # a batch weighted by this overflows every gradient at 2**10, its loss finite


def _const(values, dtype=np.float32):
    return nn.Variable.from_numpy_array(np.asarray(values, dtype))


def _hand(shape, value):
    return _const(np.full(shape, value))


def _bn(**options):
    def layer(h):
        return PF.batch_normalization(h, **options), None  # the registered mean and var

    return layer


def _hand_bn(h):
    mean, var = _hand((1, 3), 0.0), _hand((1, 3), 1.0)
    return F.batch_normalization(h, None, _hand((1, 3), 1.0), mean, var), [mean, var]


def _fused_bn(h):
    mean, var = _hand((1, 3), 0.0), _hand((1, 3), 1.0)
    return F.fused_batch_normalization(h, None, None, mean, var), [mean, var]


def _mean_subtraction(h):
    mean, t = _hand((3,), 0.0), _const(0, np.int32)
    return F.mean_subtraction(h, mean, t), [mean, t]


def _mean_subtraction_past_2_24(h):  # issue 37: a count float32 cannot hold
    mean, t = _hand((3,), 0.0), _const(2**24, np.int64)
    return F.mean_subtraction(h, mean, t), [mean, t]


def _fused_convolution(h):  # issue 37: conv + BatchNormalization + add + activation
    rng = np.random.RandomState(2)
    w = nn.parameter.get_parameter_or_create("fc_w", (3, 3, 1, 1), I.NormalInitializer(0.5, rng))
    beta, gamma = _hand((1, 3, 1, 1), 0.0), _hand((1, 3, 1, 1), 1.0)
    mean, var = _hand((1, 3, 1, 1), 0.0), _hand((1, 3, 1, 1), 1.0)
    y = F.fused_convolution(h.reshape((8, 3, 1, 1)), w, None, beta, gamma, mean, var)
    return y.reshape((8, 3)), [mean, var]


def _spectral_norm(h):
    w = nn.parameter.get_parameter_or_create("sn_w", (3, 3), I.NormalInitializer(0.5))
    u = _const(np.random.RandomState(1).randn(3))
    return F.affine(h, F.spectral_norm(w, u)), [u]


def _min_max_quantize(ema):
    def layer(h):
        qr_min, qr_max = _hand((1, 1), -1.0), _hand((1, 1), 1.0)
        levels = (_hand((1, 1), 0.0), _hand((1, 1), 255.0))
        q = F.min_max_quantize(h, qr_min, qr_max, *levels, x_min_max=True, ema=ema)
        return q, [qr_min, qr_max]

    return layer


def _assign(h):
    dst = _hand((8, 3), 0.0)
    return h + F.assign(dst, h) * 0.0, [dst]


def _scatter_nd(h):
    out = _hand((10, 3), 0.0)
    return F.scatter_nd(h, _const([list(range(1, 9))], np.int32), out=out)[1:9], [out]


def _bool_scatter(h):
    mask, out = _const([1, 0, 1, 1, 0, 1, 1, 1], np.int32), _hand((8, 3), 0.0)
    return h + F.bool_scatter(F.bool_gather(h, mask), mask, output=out) * 0.0, [out]


def _inq_affine(h):
    w = nn.parameter.get_parameter_or_create("inq_w", (3, 3), I.NormalInitializer(0.5))
    fixed = nn.Variable.from_numpy_array(np.zeros((3, 3), np.int32))
    return F.inq_affine(h, w, fixed, inq_iterations=(1, 3)), [w, fixed]


def _vat_noise(h):
    w = _hand((8, 3), 0.0)
    return h + F.vat_noise(h, w, eps=1.0), [w]


def _net(layer, weights=None, x_scales=None):
    """x (8, 4) -> affine -> ``layer`` -> tanh -> sum * weight, in cpu:half; the solver over
    every need_grad parameter. The feeder's call ``k`` weights the loss by ``weights[k]``
    (default: :data:`SPIKE` at call 1) and scales x by ``x_scales[k]`` (default 1). Returns the
    solver, the loss, the feeder and the layer's state."""
    weights = {1: SPIKE} if weights is None else weights
    x_scales = x_scales or {}
    rng = np.random.RandomState(0)
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(f"written{next(SCOPES)}"):
        x, weight = nn.Variable((8, 4)), nn.Variable(())
        h = PF.affine(x, 3, w_init=I.NormalInitializer(0.5, rng=rng), name="fc")
        out, state = layer(h)
        loss = F.sum(F.tanh(out)) * weight
        if state is None:
            state = [v for k, v in nn.get_parameters(grad_only=False).items() if not v.need_grad]
        solver = S.Sgd(0.01)
        solver.set_parameters(nn.get_parameters())
    calls = itertools.count()

    def feed():
        call = next(calls)
        x.d = np.random.RandomState(call).randn(8, 4) * x_scales.get(call, 1.0)
        weight.d = weights.get(call, 1.0)

    return solver, loss, feed, state


LAYERS = {
    "bn_no_scale": _bn(no_scale=True),
    "bn_no_bias": _bn(no_bias=True),
    "bn_no_scale_no_bias": _bn(no_scale=True, no_bias=True),
    "hand_made_bn_no_bias": _hand_bn,
    "fused_bn": _fused_bn,
    "mean_subtraction": _mean_subtraction,
    "mean_subtraction_past_2_24": _mean_subtraction_past_2_24,
    "fused_convolution": _fused_convolution,
    "spectral_norm": _spectral_norm,
    "min_max_quantize_ema": _min_max_quantize(ema=True),
    "min_max_quantize": _min_max_quantize(ema=False),
    "assign": _assign,
    "scatter_nd_out": _scatter_nd,
    "bool_scatter_output": _bool_scatter,
    "inq_affine": _inq_affine,
    "vat_noise": _vat_noise,
}


@pytest.mark.parametrize("name", sorted(LAYERS))
@pytest.mark.parametrize("on_overflow", ["skip", "retry"])
def test_a_skipped_step_puts_back_what_each_function_wrote(name, on_overflow):
    """Step 0 is clean; step 1 (weighted by 1000) overflows at every scale tried and is
    skipped: every state the layer keeps must read as after step 0, in its dtype (before issue
    28 the functions missed from the table, and BatchNormalization with no_scale or no_bias,
    kept the skipped batch's values)."""
    solver, loss, feed, state = _net(LAYERS[name])
    policy = DynamicScale(init_scale=2.0**10, growth_interval=1000)
    upd = DynamicLossScalingUpdater(
        solver, loss, feed, policy=policy, on_overflow=on_overflow, max_retries=2
    )
    assert upd.update().update_applied
    before = [(v.d.copy(), np.dtype(v.data.dtype)) for v in state]
    record = upd.update()
    assert not record.update_applied and not record.bad_batch
    for v, (values, dtype) in zip(state, before):
        assert np.array_equal(v.d, values, equal_nan=True), name
        assert np.dtype(v.data.dtype) == dtype, name


@pytest.mark.parametrize("name", ["bn_no_scale", "bn_no_bias", "bn", "fused_convolution"])
def test_retries_move_the_statistics_once_as_one_plain_forward(name):
    """A batch weighted by 100 overflows from 2**15 down and is retried until finite: its
    BatchNormalization statistics move as in one plain nnabla forward of it (the issue measured
    one move per attempt with no_scale / no_bias, and with FusedConvolution, issue 37)."""
    layer = {**LAYERS, "bn": _bn()}[name]
    results = []
    for plain in (False, True):
        nn.clear_parameters()
        solver, loss, feed, state = _net(layer, weights={0: 100.0})
        if plain:
            feed()
            loss.forward()
        else:
            policy = DynamicScale(init_scale=2.0**15, growth_interval=1000)
            upd = DynamicLossScalingUpdater(
                solver, loss, feed, policy=policy, on_overflow="retry", max_retries=12
            )
            record = upd.update()
            assert record.attempts >= 3 and record.update_applied
        results.append([v.d.copy() for v in state])
    for got, want in zip(*results):
        assert np.array_equal(got, want)


@pytest.mark.parametrize(
    "name, shown", [("bn_no_scale_no_bias", "bn/var"), ("fused_convolution", "FusedConvolution")]
)
def test_an_inf_variance_is_reported_with_no_scale_and_no_bias(caplog, name, shown):
    """Both options drop beta and gamma: the table's old indices (3, 4) missed the variance,
    so a running variance made inf by a x300 batch was not reported (nor FusedConvolution's,
    missing from the table before issue 37)."""
    layer = LAYERS[name]
    solver, loss, feed, state = _net(layer, weights={}, x_scales={1: 300.0})
    upd = DynamicLossScalingUpdater(solver, loss, feed, restore_on_skip=False, scale=2.0**15)
    upd.update()
    with caplog.at_level(logging.WARNING, logger="updater.driver.forward_state"):
        upd.update()
    assert not np.isfinite(state[1].d).all()  # the variance, kept (restore_on_skip=False)
    assert upd.nonfinite_statistics == 1 and shown in caplog.text
