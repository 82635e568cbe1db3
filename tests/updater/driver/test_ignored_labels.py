"""Issue 48, finding 1: nnabla's SoftmaxCrossEntropy and CategoricalCrossEntropy ignore every
negative label (loss 0, gradient 0 for its row), so a -1 padding label is legitimate data: an
overflowing step with one backs off on every finite_check path, as nnabla's own updater does
(before, it was a bad batch and the scale stayed). A label >= n, and a -1 read by Embed (which
really reads out of bounds), are still bad data."""

import itertools

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest
from nnabla.experimental.mixed_precision_training import (
    DynamicLossScalingUpdater as NnablaUpdater,
)

from tests.nnabla_models import cpu_context
from updater import DynamicLossScalingUpdater, DynamicScale, NonFiniteGradientsError
from updater.driver.arrays import bad_indices
from updater.driver.checks import PATHS
from updater.driver.flat import DeviceStats
from updater.driver.value_ranges import Range, input_ranges

pytestmark = pytest.mark.nnabla
SCOPES = itertools.count()
CHECKS = ["auto", *sorted(PATHS)]
IGNORED = [-1, -7, -100, -1e6, -(2**31) + 5, -(2**31)]
"""Negative labels measured on the installed nnabla (the lowest an int32 label holds last)."""
LOSSES = {
    "SoftmaxCrossEntropy": lambda y, t: F.softmax_cross_entropy(y, t),
    "CategoricalCrossEntropy": lambda y, t: F.categorical_cross_entropy(F.softmax(y), t),
}


def _verdict(loss, variable) -> bool:
    """Whether the table calls ``variable``'s values (as they are now) bad data."""
    return bool(bad_indices([variable.data], input_ranges(loss, [variable])))


@pytest.mark.parametrize("type_config", ["half", "float"])
@pytest.mark.parametrize("dtype", [np.int64, np.float32])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_the_installed_nnabla_ignores_every_negative_label_and_the_table_knows(
    name, dtype, type_config
):
    """Row 1's label is negative: nnabla gives it loss 0 and gradient 0 (measured here, so a
    nnabla that changes fails this test); the table takes it as data in range, and takes 3
    (one past the 3 classes) and -2**31 - 1 (an int32 wraps it to 2**31 - 1) as bad."""
    for label in IGNORED:
        if dtype == np.float32 and label < -1e6:
            continue  # not an integer in float32
        with nn.context_scope(cpu_context(type_config)):
            x, t = nn.Variable((3, 3), need_grad=True), nn.Variable((3, 1))
            loss = LOSSES[name](x, t)
        x.d = np.random.RandomState(0).randn(3, 3)
        t.d = np.array([[2], [label], [0]], dtype=dtype)
        loss.forward()
        x.grad.zero()
        loss.backward(1.0)
        assert loss.d[1, 0] == 0 and loss.d[0, 0] > 0, label
        assert not x.g[1].any() and x.g[0].any(), label
        assert not _verdict(loss, t), label
    for label in (3, -(2**31) - 1):
        t.d = np.array([[2], [label], [0]], dtype=np.int64)  # not run: nnabla reads out of bounds
        assert _verdict(loss, t), label
    why = input_ranges(loss, [t])[0].why
    assert why.startswith("an index in [0, 3)") and f"ignores a label in [{-(2**31)}, 0)" in why


def test_the_other_index_readers_keep_zero_to_n():
    """Embed, TopNError and ConfusionMatrix read a negative index out of bounds (their
    sources have no test for it; OneHot: tests/updater/driver/test_index_entries.py): -1 and
    n are bad, 0 and n - 1 are not (not run in nnabla)."""
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(f"keep{next(SCOPES)}"):
        ids, t = nn.Variable((2, 1)), nn.Variable((2, 1))
        y = PF.affine(PF.embed(ids, 5, 4), 5)
        readers = {
            ids: (F.sum(y), 5, "Embed"),
            t: (F.sum(F.top_n_error(y, t)) + F.sum(F.confusion_matrix(y, t)), 5, "TopNError"),
        }
    for v, (loss, n, reader) in readers.items():
        for values, bad in (([0, n - 1], False), ([0, -1], True), ([n, 0], True)):
            v.d = np.array(values)[:, None]
            assert _verdict(loss, v) == bad, (reader, values)
        assert f"an index in [0, {n})" in input_ranges(loss, [v])[0].why
        assert "ignores" not in input_ranges(loss, [v])[0].why


class Labelled:
    """x (4, 3) -> affine(3) -> SoftmaxCrossEntropy in cpu:half; x of 200 overflows the
    gradients at 2**15 (wrong labels), of 1 does not. Row 2's label is ``label``; with
    ``embed``, the labels are also ids of a fixed 3-entry Embed added to the logits (fixed, so
    that nnabla's backward writes no row: a -1 is only read out of bounds)."""

    def __init__(self, label, embed=False):
        rng = np.random.RandomState(0)
        with nn.context_scope(cpu_context("half")), nn.parameter_scope(f"lab{next(SCOPES)}"):
            self.x, self.t = nn.Variable((4, 3)), nn.Variable((4, 1))
            y = PF.affine(self.x, 3, w_init=I.NormalInitializer(0.5, rng))
            if embed:
                y = y + F.reshape(PF.embed(self.t, 3, 3, fix_parameters=True), (4, 3))
            self.loss = F.mean(F.softmax_cross_entropy(y, self.t))
            self.solver = S.Sgd(0.01)
            self.solver.set_parameters(nn.get_parameters(grad_only=True))
        self.label, self.size = label, 200.0

    def feed(self):
        self.x.d = self.size * np.random.RandomState(1).randn(4, 3)
        self.t.d = np.array([[1], [0], [self.label], [0]])


@pytest.mark.parametrize("check", CHECKS)
def test_an_overflowing_step_with_a_negative_label_backs_off_like_nnablas_updater(check):
    m = Labelled(-1)
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, m.feed, finite_check=check, policy=DynamicScale(2.0**15)
    )
    rec = u.update()
    assert not rec.bad_batch and not rec.update_applied and rec.loss_finite
    assert rec.new_scale == rec.scale / 2 == 2.0**14  # backed off: was kept at 2**15
    m.size = 1.0
    while not u.update().update_applied:
        pass
    assert u.scale < 2.0**15
    other = Labelled(-1)
    theirs = NnablaUpdater(other.solver, other.loss, other.feed, scale=2.0**15)
    theirs.update()
    assert theirs.scale < 2.0**15  # nnabla's own updater backs off on the same data


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("label,embed", [(3, False), (-1, True)])
def test_a_label_beyond_the_classes_or_a_negative_embed_id_is_still_a_bad_batch(
    check, label, embed
):
    m = Labelled(label, embed)
    u = DynamicLossScalingUpdater(
        m.solver,
        m.loss,
        m.feed,
        finite_check=check,
        policy=DynamicScale(2.0**15),
        max_consecutive_nonfinite=2,
    )
    rec = u.update()
    assert rec.bad_batch and rec.new_scale == rec.scale == 2.0**15
    with pytest.raises(NonFiniteGradientsError) as info:
        u.update()
    [name] = info.value.input_names
    assert "inf/NaN or not an index in [0, 3)" in name and name in str(info.value)
    assert ("Embed" in name.split(":")[1]) == embed  # the reader whose bounds are binding
    assert ("ignores a label" in name) == (not embed)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_the_host_check_and_the_device_graph_read_both_bounds_alike(dtype):
    """A cross-entropy's labels (-2**31 - 1, 3) and a float16 value's (-65520, 65520), each
    value judged by the host check and by the device path's graph, against Range.holds."""
    labels = Range(-(2.0**31) - 1, 3.0, "labels")
    values = Range(-65520.0, 65520.0, "values")
    cases = [(labels, v) for v in (0, 2, -1, -(2**31), 3, 7, -3e9)]
    cases += [(values, v) for v in (0, 65504, -65504, 65520, -65520, 1e6)]
    flat = DeviceStats(cpu_context("float"))
    for bounds, value in cases:
        if dtype == np.int64 and value != int(value):
            continue
        array = nn.NdArray.from_numpy_array(np.array([1, value, 0], dtype=dtype))
        bad = not bounds.holds(value)
        assert bool(bad_indices([array], [bounds])) == bad, (bounds.why, value)
        read = flat.read([], None, None, None, [array], (), [(array, *bounds[:2])])
        assert read.inputs_bad == bad, (bounds.why, value)
    assert bad_indices([nn.NdArray.from_numpy_array(np.array([np.nan]))], [labels]) == [0]
