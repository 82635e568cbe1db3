"""Issue 22, cost at depth: the device path runs a fixed number of nnabla functions per update
whatever the number of parameter arrays (and still one host read); the "numpy" path on many
small arrays checks one concatenation; both decide, unscale and name bad parameters as before;
"auto" chooses by the number of arrays and their sizes."""

import itertools
import math

import nnabla as nn
import numpy as np
import pytest

import updater.driver.checks.host as gradients
from tests.nnabla_models import TinyClassifier, assert_same_values, param_values
from updater import DynamicLossScalingUpdater, DynamicScale, HeadroomScale, NonFiniteGradientsError
from updater.driver.arrays import _check_array, host_reads
from updater.driver.checks import resolve_path
from updater.driver.flat import device_functions

pytestmark = pytest.mark.nnabla

SPIKE = 1e4  # loss weight that overflows float16 at the scales used here
_SCOPES = itertools.count()


def deep(depth, type_config="half", solver="momentum"):
    return TinyClassifier(
        f"deep{next(_SCOPES)}", depth=depth, type_config=type_config, solver=solver
    )


def per_update(updater, steps=3):
    """Nnabla functions of the flat graphs and host reads per update()."""
    functions, reads = device_functions(), host_reads()
    for _ in range(steps):
        updater.update()
    return (device_functions() - functions) / steps, (host_reads() - reads) / steps


def test_device_path_runs_the_same_functions_at_any_depth_in_one_host_read():
    counts = []
    for depth in (1, 20):
        m = deep(depth)
        u = DynamicLossScalingUpdater(
            m.solver, m.loss, m.feeder(), finite_check="solver", policy=HeadroomScale()
        )
        u.update()  # builds the graph
        counts.append(per_update(u))
        assert len(u.param_names) == 2 * depth + 4
    assert counts[0] == counts[1]
    functions, reads = counts[0]
    # with the checks of |g| max, the loss, the inputs, the range of the half-read ones and
    # the labels' range (below the number of classes, issue 37)
    assert reads == 1 and 0 < functions <= 22


def test_many_small_arrays_are_checked_in_one_concatenation_on_the_numpy_path():
    m = deep(10, type_config="float")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), finite_check="numpy")
    assert not u._work.check.by_array and len(u.param_names) == 24
    u.update()
    functions, reads = per_update(u)
    assert functions == 1  # one F.concatenate
    assert reads == 1 + 1  # one view of its result and of the loss (the inputs: a step whose
    # gradients are not finite only, issue 37)


@pytest.mark.parametrize("check", ["numpy", "solver"])
@pytest.mark.parametrize("policy", [DynamicScale(2.0**12, growth_interval=2), HeadroomScale()])
def test_concatenating_paths_train_bit_for_bit_as_nnabla_and_name_the_bad_arrays(check, policy):
    """Same records (skips, scales, |g| max) and the same parameters, bit for bit, as the
    "nnabla" path (both unscale with solver.scale_grad), overflowing steps included; the error
    names exactly the parameters whose gradients overflowed."""
    runs = {}
    for path in ("nnabla", check):
        m = deep(10)
        u = DynamicLossScalingUpdater(
            m.solver,
            m.loss,
            m.feeder(weights={1: SPIKE, 3: SPIKE}),
            finite_check=path,
            policy=policy,
        )
        records = [u.update() for _ in range(5)]
        runs[path] = records, param_values(m.params)
        m.weight.d = math.inf
        u.max_consecutive_nonfinite = 1
        u.data_feeder = lambda m=m: m.weight.__setattr__("d", math.inf)
        with pytest.raises(NonFiniteGradientsError) as info:
            u.update()
        runs[path] += (sorted(info.value.param_names),)
    assert [r.update_applied for r in runs[check][0]] == [True, False, True, False, True]
    assert runs[check][0] == runs["nnabla"][0]
    assert_same_values(runs[check][1], runs["nnabla"][1])
    assert runs[check][2] == runs["nnabla"][2] and len(runs[check][2]) == 24


def test_numpy_path_unscales_and_clips_as_it_does_array_by_array(monkeypatch):
    """The concatenated layout and the array-by-array layout of "numpy" (forced with
    FEW_ARRAYS) give the same records; parameters agree up to the float64 rounding of the two
    sums of squares (chunked differently)."""
    runs = []
    for few in (gradients.FEW_ARRAYS, 10**6):
        monkeypatch.setattr(gradients, "FEW_ARRAYS", few)
        m = deep(10)
        u = DynamicLossScalingUpdater(
            m.solver,
            m.loss,
            m.feeder(weights={2: SPIKE}),
            finite_check="numpy",
            policy=HeadroomScale(init_scale=2.0**12),
            clip_grad_norm=0.05,
        )
        assert u._work.check.by_array == (few > 24)
        runs.append(([u.update() for _ in range(4)], param_values(m.params)))
    assert runs[0][0] == runs[1][0]
    assert [r.update_applied for r in runs[0][0]] == [True, True, False, True]
    for name in runs[0][1]:
        np.testing.assert_allclose(runs[0][1][name], runs[1][1][name], rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("check", ["numpy", "solver"])
def test_an_unused_parameter_stays_lazily_zero_and_is_not_updated(check):
    """A parameter of the solver outside the graph: the concatenation reads its gradient without
    making it written, so Momentum and weight decay leave it alone, as nnabla's solvers do."""
    m = deep(10)
    unused = nn.Variable((3,), need_grad=True)
    unused.d = 1.0
    m.solver.set_parameters({"unused": unused}, reset=False)
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, m.feeder(), finite_check=check, weight_decay=0.1
    )
    for _ in range(3):
        assert u.update().update_applied
    assert unused.grad.zeroing
    np.testing.assert_array_equal(unused.d, 1.0)


@pytest.mark.parametrize("check", ["numpy", "solver"])
def test_a_parameter_added_later_is_followed_by_the_concatenation(check):
    m = deep(10, type_config="float")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), finite_check=check)
    u.update()
    extra = nn.Variable((2,), need_grad=True)
    m.solver.set_parameters({"extra": extra}, reset=False)
    bad = nn.NdArray.from_numpy_array(np.array([np.nan, 1.0], np.float32))
    u.data_feeder = lambda: extra.grad.copy_from(bad)  # as an all-reduce into it could leave
    u.max_consecutive_nonfinite = 1
    with pytest.raises(NonFiniteGradientsError) as info:
        u.update()
    assert info.value.param_names == ["extra"]


@pytest.mark.parametrize(
    "flag_only,n_values,n_arrays,chosen",
    [
        (True, 4_810, 4, "nnabla"),  # small model: two C++ loops
        (True, 670_000, 6, "numpy"),  # few large arrays: the fused pass per array
        (True, 420_000, 202, "nnabla"),  # many small arrays: no Python per array
        (True, 30_000_000, 160, "numpy"),  # many large arrays (ResNet-like): fused pass
        (False, 420_000, 202, "numpy"),  # |g| max, clipping or a recorder read gradients
        (False, 4_810, 4, "numpy"),
    ],
)
def test_auto_on_the_cpu_chooses_by_the_number_of_arrays_and_their_sizes(
    flag_only, n_values, n_arrays, chosen
):
    assert resolve_path("auto", flag_only, n_values, n_arrays) == chosen
    assert resolve_path("solver", flag_only, n_values, n_arrays) == "solver"


@pytest.mark.parametrize(
    "values,finite,absmax",
    [
        ([1.0, -3.0, 2.0], True, 3.0),
        ([3e38, 3e38, -3e38], True, 3e38),  # the squares overflow; the values are finite
        ([1e-30, -2e-30], True, 2e-30),  # subnormal squares
        ([-np.inf, 0.0], False, math.inf),
        ([np.nan, 1.0], False, math.inf),
        ([1.0, np.inf], False, math.inf),
        ([-0.0, 0.0], True, 0.0),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_exact_check_uses_the_smallest_and_largest_value(values, finite, absmax, dtype):
    a = np.array(values, dtype)
    assert _check_array(a, True) == (finite, pytest.approx(absmax) if finite else math.inf)
    assert _check_array(a, False)[0] is finite
