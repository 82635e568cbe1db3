"""The finite check decides as nnabla's ``check_inf_or_nan_grad()`` on real tiny graphs: each
path, generated float16 values, the gradient views, ``"auto"``'s choice and |g| max."""

import math

import nnabla as nn
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.nnabla_models import GRADIENT_RUNS, gradient_values, inspect, set_grads
from tests.updater.driver.test_updater import make
from updater import HeadroomScale
from updater.driver.arrays import grad_stats, host_view
from updater.driver.updater import DynamicLossScalingUpdater

pytestmark = pytest.mark.nnabla

with np.errstate(over="ignore"):
    ROUNDS_TO_INF = np.full((3, 8), 65520.0).astype(np.float16)  # 65520 rounds to inf
SPIKE = 1e3  # loss weight of a spike batch: overflows float16 at scales above ~64


@pytest.mark.parametrize("need_absmax", [True, False])
@pytest.mark.parametrize(
    "case,type_config",
    GRADIENT_RUNS,
)
def test_finite_check_equals_nnabla_check(case, type_config, need_absmax):
    m = make(type_config=type_config)
    dtype = np.float16 if type_config == "half" else np.float32
    values = gradient_values(m, case, dtype, seed=3)
    set_grads(m, values)
    arrays = [p.grad.get_data("r") for p in m.solver.get_parameters().values()]
    assert arrays[0].dtype == dtype
    flags, absmax = grad_stats(arrays, need_absmax)
    nnabla_says_bad = m.solver.check_inf_or_nan_grad()
    assert all(flags) == (not nnabla_says_bad)
    bad = {n for n, p in m.params.items() if not np.isfinite(values[n]).all()}
    assert {n for n, ok in zip(m.solver.get_parameters(), flags) if not ok} == bad
    all_values = np.concatenate([a.astype(np.float64).ravel() for a in values.values()])
    if not np.isfinite(all_values).all():
        assert absmax == math.inf
    elif need_absmax:
        assert absmax == np.abs(all_values).max()
    else:
        assert absmax is None


@given(
    hnp.arrays(np.float16, (3, 8), elements=st.floats(width=16, allow_nan=True)),
)
@example(np.full((3, 8), 2.0**-25, np.float16))
@example(np.full((3, 8), 65504, np.float16))
@example(np.full((3, 8), 2.0**-14, np.float16))
@example(ROUNDS_TO_INF)
def test_finite_check_equals_nnabla_check_on_generated_float16(values):
    nn.clear_parameters()
    m = make()
    name = "fc1/affine/W"
    p = m.params[name]
    filled = np.resize(values, p.shape).astype(np.float16)
    set_grads(m, {name: filled})
    flags, absmax = grad_stats([q.grad.get_data("r") for q in m.params.values()])
    assert all(flags) == (not m.solver.check_inf_or_nan_grad())
    if all(flags):
        assert absmax == np.abs(filled.astype(np.float64)).max()


@pytest.mark.parametrize("type_config", ["half", "float"])
def test_gradient_views_are_the_get_data_memory_and_keep_the_dtype(type_config):
    m = make(type_config=type_config)
    dtype = np.float16 if type_config == "half" else np.float32
    feed = m.feeder()
    m.solver.zero_grad()
    feed()
    m.loss.forward()
    m.loss.backward(8.0)
    for p in m.params.values():
        view = host_view(p.grad)
        assert view.dtype == dtype and p.grad.dtype == dtype  # read in place, never cast
        data = p.grad.get_data("r")
        assert view.ctypes.data == data.ctypes.data  # the same host memory, no copy
        assert np.array_equal(view, data.ravel())
        assert view.any()  # real gradients, not a fresh zeroed buffer
    # nnabla's own calls still see the same arrays after the views were taken
    before = {n: p.grad.get_data("r").copy() for n, p in m.params.items()}
    assert not m.solver.check_inf_or_nan_grad()
    m.solver.scale_grad(0.5)
    for n, p in m.params.items():
        assert np.array_equal(host_view(p.grad), (before[n] * dtype(0.5)).ravel())


@pytest.mark.parametrize(
    "case,type_config",
    GRADIENT_RUNS,
)
def test_updater_numpy_check_through_views_equals_nnabla_check(case, type_config):
    m = make(type_config=type_config)
    dtype = np.float16 if type_config == "half" else np.float32
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), finite_check="numpy")
    values = gradient_values(m, case, dtype, seed=5)
    set_grads(m, values)
    found = inspect(u)
    arrays, finite, absmax, bad = found.arrays, found.finite, found.absmax, found.bad
    assert finite == (not m.solver.check_inf_or_nan_grad())
    assert set(bad) == {n for n, v in values.items() if not np.isfinite(v).all()}
    assert [a.dtype for a in arrays] == [dtype] * len(values)
    assert absmax is None  # the legacy policy does not ask for |g| max
    for p in m.params.values():
        assert p.grad.dtype == dtype


@given(hnp.arrays(np.float16, (3, 8), elements=st.floats(width=16, allow_nan=True)))
@example(np.full((3, 8), 2.0**-25, np.float16))
@example(np.full((3, 8), 2.0**-24, np.float16))
@example(np.full((3, 8), 65504, np.float16))
@example(ROUNDS_TO_INF)
def test_updater_numpy_check_through_float16_views_on_generated_values(values):
    nn.clear_parameters()
    m = make()
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), finite_check="numpy")
    name = "fc2/affine/W"
    filled = np.resize(values, m.params[name].shape).astype(np.float16)
    set_grads(m, {name: filled})
    found = inspect(u)
    finite, bad = found.finite, found.bad
    assert finite == (not m.solver.check_inf_or_nan_grad())
    assert bad == ([] if np.isfinite(filled).all() else [name])


@pytest.mark.parametrize("hidden,expected", [(8, "nnabla"), (2**15, "numpy")])
def test_auto_check_uses_numpy_views_on_cpu_for_large_models(hidden, expected):
    # 4 inputs -> hidden -> 3 classes: 8 hidden units hold 67 values, 2**15 hold 262147
    m = make(type_config="float", hidden=hidden)
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), finite_check="auto")
    assert u.finite_check == expected
    ref = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), finite_check="solver")
    set_grads(m, {"fc1/affine/b": np.full(hidden, np.inf, np.float32)})
    facts = [inspect(v) for v in (u, ref)]
    assert [(f.finite, f.absmax, list(f.bad)) for f in facts] == [
        (False, None, ["fc1/affine/b"])
    ] * 2


@pytest.mark.parametrize("check", ["numpy", "solver"])
def test_both_check_paths_decide_alike_in_training(check):
    m = make()
    feed = m.feeder(weights={1: SPIKE, 4: SPIKE})
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, feed, scale=2.0**12, N=2, finite_check=check, history=10
    )
    assert u.finite_check == check
    recs = [u.update() for _ in range(6)]
    assert [r.update_applied for r in recs] == [True, False, True, True, False, True]


def test_headroom_policy_gets_the_true_scaled_absmax():
    m = make()
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, m.feeder(), policy=HeadroomScale(init_scale=2.0**4), finite_check="auto"
    )
    assert u.finite_check == "numpy"  # the policy needs |g| max, read in the same pass
    rec = u.update()
    assert rec.grad_absmax > 0
    # next scale: largest power of two keeping (absmax/scale)*margin below 65504
    unscaled = rec.grad_absmax / rec.scale
    assert rec.new_scale == min(2.0**15, 2 ** math.floor(math.log2(65504 / (unscaled * 2.0))))


def test_solver_check_path_measures_absmax_with_nnabla_functions():
    m = make()
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, m.feeder(), policy=HeadroomScale(init_scale=2.0**4), finite_check="numpy"
    )
    a = u.update().grad_absmax
    nn.clear_parameters()
    m2 = make()
    u2 = DynamicLossScalingUpdater(
        m2.solver,
        m2.loss,
        m2.feeder(),
        policy=HeadroomScale(init_scale=2.0**4),
        finite_check="solver",
    )
    assert u2.update().grad_absmax == a


# ---------------------------------------------------------------- clipping and weight decay
