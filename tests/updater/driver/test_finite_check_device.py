"""Issue 13, the device path (``finite_check="solver"``, the default off the CPU), forced on the
CPU: one nnabla graph over all gradients, one host read per update(), the same decisions as the
NumPy path."""

import math

import nnabla as nn
import numpy as np
import pytest

from tests.nnabla_models import (
    GRADIENT_RUNS,
    TinyClassifier,
    assert_same_values,
    gradient_values,
    inspect,
    inspected,
    iterate,
    param_values,
    set_grads,
)
from updater import DynamicScale, HeadroomScale
from updater.driver.arrays import host_reads
from updater.driver.flat import DeviceStats
from updater.driver.updater import DynamicLossScalingUpdater

pytestmark = pytest.mark.nnabla

SPIKE = 1e3  # loss weight that overflows float16 at the scales used here


def pair(type_config, policy, clip=None):
    """One model with two updaters over it: the NumPy path and the device path."""
    m = TinyClassifier(type_config=type_config)
    return m, [
        DynamicLossScalingUpdater(
            m.solver, m.loss, finite_check=check, policy=policy, clip_grad_norm=clip
        )
        for check in ("numpy", "solver")
    ]


@pytest.mark.parametrize("policy", [DynamicScale(), HeadroomScale()])
@pytest.mark.parametrize("case,type_config", GRADIENT_RUNS)
def test_device_check_decides_as_numpy_and_nnabla_in_one_host_read(case, type_config, policy):
    dtype = np.float16 if type_config == "half" else np.float32
    m, (numpy_path, device_path) = pair(type_config, policy)
    values = gradient_values(m, case, dtype)
    set_grads(m, values)
    before = host_reads()
    on_device = inspected(device_path)
    assert host_reads() - before == 1
    assert on_device[0] is None  # no gradient came to the host
    assert on_device[1:] == inspected(numpy_path)[1:]
    assert on_device[1] == (not m.solver.check_inf_or_nan_grad())
    assert set(on_device[3]) == {n for n, v in values.items() if not np.isfinite(v).all()}
    if policy.needs_grad_absmax:
        every = np.concatenate([v.astype(np.float64).ravel() for v in values.values()])
        assert on_device[2] == (np.abs(every).max() if on_device[1] else math.inf)
    for name, p in m.params.items():  # read, not written: dtype and values as they were
        assert p.grad.dtype == dtype
        assert np.array_equal(p.grad.get_data("r"), values[name], equal_nan=True)


@pytest.mark.parametrize("case,type_config", GRADIENT_RUNS)
def test_device_sum_of_squares_matches_the_numpy_pass(case, type_config):
    """Each array's squares are summed as ``m**2 * sum((g/m)**2)``: no float32 overflow, even
    for 3e38 (whose square overflows a plain float32 sum)."""
    dtype = np.float16 if type_config == "half" else np.float32
    m, (numpy_path, device_path) = pair(type_config, DynamicScale(), clip=1.0)
    values = gradient_values(m, case, dtype)
    set_grads(m, values)
    on_device = inspect(device_path, 2.0**4)
    set_grads(m, values)
    in_numpy = inspect(numpy_path, 2.0**4)
    assert on_device.finite == in_numpy.finite
    if not in_numpy.finite:
        assert on_device.sumsq is None
        return
    assert not on_device.unscaled  # unscale() will call solver.scale_grad on the device
    every = np.concatenate([v.astype(np.float64).ravel() for v in values.values()]) / 2.0**4
    assert math.isfinite(on_device.sumsq)
    assert on_device.sumsq == pytest.approx(float(np.dot(every, every)), rel=1e-6)
    assert in_numpy.sumsq == pytest.approx(on_device.sumsq, rel=1e-6)


def train(check, steps=6, **kwargs):
    nn.clear_parameters()
    m = TinyClassifier("train", solver="momentum")
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, m.feeder(weights={1: SPIKE, 4: SPIKE}), finite_check=check, **kwargs
    )
    reads = []
    records = []
    for _ in range(steps):
        before = host_reads()
        records.append(u.update())
        reads.append(host_reads() - before)
    return records, param_values(m.params), reads


@pytest.mark.parametrize(
    "kwargs",
    [
        {"scale": 2.0**12, "N": 2},
        {"policy": HeadroomScale(init_scale=2.0**12), "clip_grad_norm": 0.05},
        {"policy": DynamicScale(init_scale=2.0**12), "clip_grad_norm": 0.05, "weight_decay": 1e-3},
    ],
)
def test_device_path_trains_as_the_numpy_path_with_one_host_read_per_update(kwargs):
    """Same skips, scales and |g| max; parameters equal up to the float32 rounding of the two
    sums of squares (clipping scales on the device, with solver.scale_grad); overflowing steps
    included, each update() makes one host read on the device path."""
    numpy_records, numpy_params, numpy_reads = train("numpy", **kwargs)
    device_records, device_params, device_reads = train("solver", **kwargs)
    assert device_records == numpy_records
    assert [r.update_applied for r in device_records] == [True, False, True, True, False, True]
    assert device_reads == [1] * 6
    # one view per gradient array and of the loss (of the inputs only on a step whose
    # gradients are not finite: issue 37)
    assert numpy_reads[0] == 4 + 1
    for name in numpy_params:
        np.testing.assert_allclose(device_params[name], numpy_params[name], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("init_scale", [2.0**12, 3 * 2.0**10])  # seeds 2**k and 3 * 2**k
@pytest.mark.parametrize("on_overflow", ["skip", "retry"])
def test_device_path_update_is_exactly_backward_unscale_step(on_overflow, init_scale):
    """update() measures the norm for clipping on ``g * (1/seed)`` in its one read, staged
    step() on the unscaled gradients: the same float32 values, so the same clipping."""
    runs = []
    for staged in (False, True):
        nn.clear_parameters()
        m = TinyClassifier("stages", solver="adam", lr=0.01)
        u = DynamicLossScalingUpdater(
            m.solver,
            m.loss,
            m.feeder(weights={2: SPIKE, 5: SPIKE}),
            finite_check="solver",
            policy=DynamicScale(init_scale, growth_interval=3),
            on_overflow=on_overflow,
            clip_grad_norm=0.5,
            weight_decay=1e-3,
            accum_grad=2,
        )
        runs.append((iterate(u, 8, staged), param_values(m.params)))
    assert runs[0][0] == runs[1][0]
    assert_same_values(runs[0][1], runs[1][1])


def test_device_graph_measures_absmax_over_the_given_arrays_and_checks_the_loss():
    """With a communicator that all-reduces only some gradients, |g| max is taken over those;
    the loss rides in the same read."""
    m = TinyClassifier()
    values = gradient_values(m, "finite", np.float16)
    set_grads(m, values)
    stats = DeviceStats(m.loss.parent.context)
    names = list(m.params)
    grads = [m.params[n].grad for n in names]
    m.loss.d = np.nan
    before = host_reads()
    reading = stats.read(grads, [grads[1]], None, m.loss)
    assert host_reads() - before == 1
    assert reading.absmax == np.abs(values[names[1]].astype(np.float64)).max()
    assert reading.finite and reading.loss_bad
    m.loss.d = 1.0
    assert not stats.read(grads, [], None, m.loss).loss_bad
