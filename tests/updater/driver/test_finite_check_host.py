"""Issue 13 on the CPU: update()'s one pass per gradient array (check fused with unscaling),
gradients nnabla's solvers skip left untouched, and the policies' one-run path."""

import math

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import (
    GRADIENT_RUNS,
    TinyClassifier,
    cpu_context,
    gradient_values,
    inspect,
    inspected,
    iterate,
    param_values,
    set_grads,
)
from updater import DynamicScale, HeadroomScale, NnablaLegacy, StaticScale
from updater.common.float16 import FP16_MAX
from updater.driver.arrays import host_reads
from updater.driver.updater import DynamicLossScalingUpdater
from updater.policy import largest_safe_scale


class CountingSolver:
    """Forwards to a real solver and counts the calls by method name."""

    def __init__(self, solver):
        self.solver = solver
        self.calls = []

    def __getattr__(self, name):
        method = getattr(self.solver, name)

        def counted(*args, **kwargs):
            self.calls.append(name)
            return method(*args, **kwargs)

        return counted


# ---------------------------------------------------------------- the fused pass


@pytest.mark.nnabla
@pytest.mark.parametrize("seed", [2.0**10, 2.0**-3])  # factor 1/seed <= 1 and > 1
@pytest.mark.parametrize("policy", ["dynamic", "headroom"])
@pytest.mark.parametrize("case,type_config", GRADIENT_RUNS)
def test_fused_pass_decides_as_nnabla_and_unscales_as_scale_grad(case, type_config, policy, seed):
    m = TinyClassifier(type_config=type_config)
    dtype = np.float16 if type_config == "half" else np.float32
    chosen = HeadroomScale() if policy == "headroom" else DynamicScale()
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, finite_check="numpy", policy=chosen, clip_grad_norm=1.0
    )
    values = gradient_values(m, case, dtype)
    set_grads(m, values)
    nnabla_says_bad = m.solver.check_inf_or_nan_grad()
    m.solver.scale_grad(1.0 / seed)
    expected = {n: p.grad.get_data("r").copy() for n, p in m.params.items()}
    set_grads(m, values)
    found = inspect(u, seed)
    assert found.finite == (not nnabla_says_bad)
    assert set(found.bad) == {n for n, v in values.items() if not np.isfinite(v).all()}
    assert found.unscaled and found.arrays is None
    every = np.concatenate([v.astype(np.float64).ravel() for v in values.values()])
    if policy == "headroom":
        assert found.absmax == (np.abs(every).max() if found.finite else math.inf)
    else:
        assert found.absmax is None
    if not found.finite:
        assert found.sumsq is None
        return
    for name, p in m.params.items():
        got = p.grad.get_data("r")
        assert got.dtype == np.float32  # float32 also in half mode, as scale_grad leaves it
        assert np.array_equal(got.view(np.uint32), expected[name].view(np.uint32)), name
    unscaled = np.concatenate([v.ravel() for v in expected.values()]).astype(np.float64)
    assert found.sumsq == pytest.approx(float(np.dot(unscaled, unscaled)), rel=1e-6)


@pytest.mark.nnabla
@pytest.mark.parametrize("clip", [None, 1.0])  # pieces of CHUNK values when summing squares
@pytest.mark.parametrize("seed", [2.0**10, 2.0**-3])
@pytest.mark.parametrize("bad_at", [None, 0, 299_999])  # first piece, last piece
def test_a_large_gradient_is_checked_and_unscaled_in_pieces_as_scale_grad(bad_at, seed, clip):
    """A 600x500 weight (300,000 values: more than one piece of PASS_CHUNK and of CHUNK): the
    fused pass finds an inf in any piece, unscales as ``scale_grad`` bit for bit, and sums the
    squares of every piece."""
    from updater.driver.arrays import CHUNK, PASS_CHUNK

    m = TinyClassifier(in_dim=600, hidden=500, type_config="float")
    big = m.params["fc1/affine/W"]
    assert big.size > PASS_CHUNK > CHUNK
    u = DynamicLossScalingUpdater(m.solver, m.loss, finite_check="numpy", clip_grad_norm=clip)
    rng = np.random.default_rng(0)
    values = {n: rng.standard_normal(p.shape).astype(np.float32) for n, p in m.params.items()}
    if bad_at is not None:
        values["fc1/affine/W"].reshape(-1)[bad_at] = np.inf
    set_grads(m, values)
    m.solver.scale_grad(1.0 / seed)
    expected = {n: p.grad.get_data("r").copy() for n, p in m.params.items()}
    set_grads(m, values)
    found = inspect(u, seed)
    assert found.finite == (bad_at is None)
    assert list(found.bad) == ([] if bad_at is None else ["fc1/affine/W"])
    if bad_at is not None:
        return
    for name, p in m.params.items():
        assert np.array_equal(p.grad.get_data("r").view(np.uint32), expected[name].view(np.uint32))
    if clip is not None:
        unscaled = np.concatenate([v.ravel() for v in expected.values()]).astype(np.float64)
        assert found.sumsq == pytest.approx(float(np.dot(unscaled, unscaled)), rel=1e-6)


@pytest.mark.nnabla
@pytest.mark.parametrize("type_config", ["half", "float"])
def test_update_reads_each_gradient_once_and_calls_neither_nnabla_check_nor_scale_grad(
    type_config,
):
    """The old update() ran the NumPy check, then ``solver.scale_grad`` over every gradient
    again (or ``check_inf_or_nan_grad`` and ``scale_grad`` for small models)."""
    m = TinyClassifier(type_config=type_config)
    solver = CountingSolver(m.solver)
    u = DynamicLossScalingUpdater(solver, m.loss, m.feeder(), scale=2.0**10, finite_check="numpy")
    before = host_reads()
    for _ in range(3):
        assert u.update().update_applied
    # one view per gradient and of the loss (the verdict); the inputs (the bad-batch check) only
    # on a step whose gradients are not finite (issue 37)
    assert host_reads() - before == 3 * (len(m.params) + 1)
    assert solver.calls.count("update") == 3
    assert "scale_grad" not in solver.calls and "check_inf_or_nan_grad" not in solver.calls


def half_model(gain, lr=1.0):
    """``loss = gain * sum(w * c)`` in cpu:half; the true gradient of ``w`` is ``gain * c``."""
    with nn.context_scope(cpu_context("half")), nn.parameter_scope("small"):
        c = nn.Variable((4,))
        c.d = np.array([1.0, 2.0, -3.0, 4.0]) * 2.0**-24  # float16 subnormals
        w = nn.parameter.get_parameter_or_create("w", (4,), I.ConstantInitializer(0.0))
        loss = F.mul_scalar(F.sum(w * c), gain)
        solver = S.Sgd(lr)
        solver.set_parameters({"w": w})
    return w, c, loss, solver


@pytest.mark.nnabla
@pytest.mark.parametrize("check", ["numpy", "solver", "nnabla"])
@pytest.mark.parametrize("staged", [False, True])
def test_half_mode_keeps_true_gradients_below_float16_range(staged, check):
    """True gradients ``2**-6 * c`` (2**-30 to 2**-28) flush to zero in float16; scaled by
    2**15 they are float16 values, and unscaled in float32 they reach the solver whole."""
    w, c, loss, solver = half_model(2.0**-6)
    u = DynamicLossScalingUpdater(solver, loss, policy=StaticScale(2.0**15), finite_check=check)
    if staged:
        u.backward()
        assert w.grad.dtype == np.float16  # still scaled, as backward left them
        u.unscale()
        np.testing.assert_array_equal(w.g, 2.0**-6 * c.d)
        u.step()
    else:
        u.update()
    true = (2.0**-6 * c.d).astype(np.float32)
    assert not true.astype(np.float16).any()
    np.testing.assert_array_equal(w.d, -true)


def two_parameter_model(scope):
    """``loss = sum(w1 * c)`` with a Momentum solver over ``w1`` and ``w2``; ``w2`` (outside
    the graph) has momentum left from one manual step."""
    with nn.context_scope(cpu_context("float")), nn.parameter_scope(scope):
        c = nn.Variable((3,))
        c.d = [1.0, -2.0, 0.5]
        w1 = nn.parameter.get_parameter_or_create("w1", (3,), I.ConstantInitializer(1.0))
        w2 = nn.parameter.get_parameter_or_create("w2", (3,), I.ConstantInitializer(1.0))
        loss = F.sum(w1 * c)
        solver = S.Momentum(0.1, 0.9)
        solver.set_parameters({"w1": w1, "w2": w2})
    w1.g = np.ones(3)
    w2.g = np.ones(3)
    solver.update()  # w2 now has momentum
    return loss, solver, {"w1": w1, "w2": w2}


@pytest.mark.nnabla
@pytest.mark.parametrize("check", ["numpy", "solver", "nnabla"])
@pytest.mark.parametrize("mode", ["update", "staged", "plain nnabla"])
def test_parameters_without_a_gradient_stay_untouched_as_nnabla_leaves_them(mode, check):
    """nnabla's solvers skip a parameter whose gradient nothing wrote since ``zero_grad()``
    (``grad.zeroing``). Viewing that gradient through ``data_ptr`` marks it written, and the
    old NumPy path then made Momentum move ``w2`` by its momentum on every step."""
    loss, solver, params = two_parameter_model(f"{mode}_{check}")
    if mode == "plain nnabla":
        for _ in range(3):
            solver.zero_grad()
            loss.forward()
            loss.backward()
            solver.update()
    else:
        u = DynamicLossScalingUpdater(solver, loss, finite_check=check, clip_grad_norm=10.0)
        iterate(u, 3, staged=mode != "update")
    values = param_values(params)
    after_manual_step = np.float32(1.0 - 0.1)
    np.testing.assert_array_equal(values["w2"], np.full(3, after_manual_step))
    assert not np.array_equal(values["w1"], np.full(3, after_manual_step))


# ---------------------------------------------------------------- the policy's one-run path


@pytest.mark.parametrize(
    "policy", [StaticScale(4.0), DynamicScale(), NnablaLegacy(), HeadroomScale()]
)
def test_one_run_states_hold_python_numbers(policy):
    """One run advances on Python numbers (a few microseconds a call; the old 0-d NumPy arrays
    cost about 40 us); many runs keep NumPy arrays."""
    state = policy.init()
    for finite in (True, False, np.bool_(True)):
        assert (type(state.scale), type(state.good_steps), type(state.hysteresis_left)) == (
            float,
            int,
            int,
        )
        state = policy.update(state, finite, 100.0)
    many = policy.update(policy.init((3,)), np.array([True, False, True]), np.full(3, 100.0))
    assert isinstance(many.scale, np.ndarray) and many.scale.shape == (3,)


def brute_force_safe_scale(a: float, margin: float) -> float:
    return 2.0 ** next(k for k in range(1023, -1100, -1) if a * margin * 2.0**k <= FP16_MAX)


@pytest.mark.parametrize("k", [-20, -3, 0, 5, 14])
@pytest.mark.parametrize("margin", [1.0, 2.0])
def test_largest_safe_scale_is_exact_next_to_powers_of_two(k, margin):
    """Just above ``65504 / 2**k`` the safe scale is ``2**(k-1)``; the old rounded log2 said
    ``2**k``, whose product exceeds 65504. One run and many runs agree."""
    a = float(np.nextafter(FP16_MAX / 2.0**k / margin, np.inf))
    expected = brute_force_safe_scale(a, margin)
    assert expected == 2.0 ** (k - 1)
    assert float(largest_safe_scale(a, margin)) == expected
    assert largest_safe_scale(np.array([a, a]), margin).tolist() == [expected] * 2
    p = HeadroomScale(init_scale=1.0, margin=margin, min_scale=2.0**-30, max_scale=2.0**30)
    assert p.update(p.init(), True, a).scale == expected
    many = p.update(p.init((2,)), np.array([True, True]), np.array([a, a]))
    assert many.scale.tolist() == [expected] * 2


# ---------------------------------------------------------------- small CPU models


@pytest.mark.nnabla
@pytest.mark.parametrize(
    "kwargs,expected",
    [
        ({}, "nnabla"),
        ({"policy": HeadroomScale()}, "numpy"),
        ({"clip_grad_norm": 1.0}, "numpy"),
        ({"hidden": 2**13}, "numpy"),  # 4 * 8192 + 8192 + 8192 * 3 + 3 values: over 2**15
    ],
)
def test_auto_uses_nnabla_calls_for_small_models_that_need_only_the_flag(kwargs, expected):
    hidden = kwargs.pop("hidden", 8)
    m = TinyClassifier(type_config="float", hidden=hidden)
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), **kwargs)
    assert u.finite_check == expected


@pytest.mark.nnabla
@pytest.mark.parametrize("policy", ["dynamic", "headroom"])
@pytest.mark.parametrize("case,type_config", GRADIENT_RUNS)
def test_nnabla_path_decides_as_the_numpy_path(case, type_config, policy):
    """Two C++ calls on finite flag-only steps, no host read; the gradients are read only for
    |g| max or for the names of non-finite parameters."""
    m = TinyClassifier(type_config=type_config)
    chosen = HeadroomScale() if policy == "headroom" else DynamicScale()
    paths = {
        check: DynamicLossScalingUpdater(m.solver, m.loss, finite_check=check, policy=chosen)
        for check in ("numpy", "nnabla")
    }
    set_grads(m, gradient_values(m, case, np.float16 if type_config == "half" else np.float32))
    before = host_reads()
    found = inspected(paths["nnabla"])
    reads = host_reads() - before
    assert found[1:] == inspected(paths["numpy"])[1:]
    assert reads == (0 if found[1] and policy == "dynamic" else len(m.params))


@pytest.mark.parametrize("unscale_by", [None, 2.0**-10])
def test_numpy_absmax_is_over_absmax_over_when_given(unscale_by):
    """With a communicator that all-reduces only some gradients, |g| max (scaled) is taken over
    those arrays, in the checking pass and in the fused one."""
    from updater.driver.checks import Ask
    from updater.driver.checks.host import HostCheck

    m = TinyClassifier()
    values = gradient_values(m, "finite", np.float16)
    set_grads(m, values)
    names = list(m.solver.get_parameters())
    params = m.solver.get_parameters()
    ask = Ask(True, [params[names[1]].grad], unscale_by=unscale_by)
    found = HostCheck(m.solver, None).inspect(lambda: params, ask)
    assert found.finite and found.absmax == np.abs(values[names[1]].astype(np.float64)).max()
    assert found.unscaled == (unscale_by is not None)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(), (1,), (3, 2)])
def test_host_all_finite_reads_one_value_and_many_as_numpy_does(dtype, shape):
    """The loss read: a one-value array read as one number, a larger one through a view; each
    finds inf, -inf and NaN where NumPy does, lets every finite value through (float16's
    largest and smallest too), and counts one host read; so does the read planned once for
    the array's size and dtype (:func:`finite_reader`, the updater's read of its loss)."""
    from updater.driver.arrays import finite_reader, host_all_finite

    info = np.finfo(dtype)
    values = [0.0, -0.0, 1.5, float(info.max), -float(info.max), float(info.tiny) / 4]
    values += [math.inf, -math.inf, math.nan]
    for value in values:
        data = np.full(shape, value, dtype)
        if data.size > 1:
            data.flat[0] = 1.0  # the odd value last, behind a finite one
            data.flat[-1] = value
        array = nn.NdArray.from_numpy_array(data)
        planned = finite_reader(array)
        assert (planned is host_all_finite) == (data.size > 1)
        for read in (host_all_finite, planned):
            reads = host_reads()
            assert read(array) == bool(np.isfinite(data).all()), (dtype, shape, value, read)
            assert host_reads() == reads + 1
