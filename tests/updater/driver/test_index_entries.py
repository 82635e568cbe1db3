"""Index inputs bounded as nnabla reads them (updater/driver/function_roles.py, INDEXES): each
entry of OneHot's index against its own size (before, all against the largest of ``shape``),
GatherNd's and ScatterNd's rows against their own axes with negative indices counting from the
end, ScatterAdd's indices and PackPaddedSequence's lengths (before, any finite value). Each case
is run in plain nnabla (cpu:half) and judged by the host check and the device path's graph."""

import itertools

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import cpu_context
from updater import DynamicLossScalingUpdater, DynamicScale
from updater.driver.arrays import bad_indices
from updater.driver.checks import PATHS
from updater.driver.flat import DeviceStats
from updater.driver.value_ranges import input_ranges

pytestmark = pytest.mark.nnabla
SCOPES = itertools.count()


def _verdicts(loss, v) -> tuple:
    """Whether the host check and the device path's graph call ``v``'s values bad data."""
    [found] = input_ranges(loss, [v])
    host = bool(bad_indices([v.data], [found]))
    flat = DeviceStats(cpu_context("float"))
    device = flat.read([], None, None, None, [v.data], (), [(v.data, *found.bounds)])
    return host, device.inputs_bad


def _nnabla_refuses(y) -> bool:
    """Whether nnabla's forward of ``y`` raises (its CPU kernels' index check)."""
    try:
        y.forward()
    except RuntimeError:
        return True
    return False


def _half(shape):
    with nn.context_scope(cpu_context("half")):
        return nn.Variable(shape)


def test_one_hot_bounds_each_column_by_its_own_size():
    """shape (3, 6), measured: nnabla sets the one of entry j in [-n_j, n_j) (a negative one
    counting from the end) and leaves the row all zeros outside. A 3 in column 0 is within the
    largest size (the old bound) and a -1 was bad for it; each column's own bound is exact."""
    x = _half((2, 2))
    with nn.context_scope(cpu_context("half")):
        y = F.one_hot(x, (3, 6))
    loss = F.sum(y * 1.0)
    for a, b in itertools.product(range(-4, 4), range(-7, 7)):
        x.d = np.array([[a, b], [1, 1]])
        y.forward()
        taken = -3 <= a < 3 and -6 <= b < 6
        assert y.d[0].sum() == taken and (not taken or y.d[0, a, b] == 1) and y.d[1, 1, 1] == 1
        assert _verdicts(loss, x) == (not taken, not taken), (a, b)
    assert "(3, 6)" in input_ranges(loss, [x])[0].why


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_gather_nd_takes_what_nnabla_takes_negative_indices_included(dtype):
    """x (3, 5): row 0 of the index in [-3, 3), row 1 in [-5, 5), as nnabla's kernel checks
    them (a negative index counts from the end; a float is truncated toward 0)."""
    data = nn.Variable.from_numpy_array(np.arange(15.0).reshape(3, 5))
    idx = _half((2, 1))
    y = F.gather_nd(data, idx)
    loss = F.sum(y)
    for first, second in itertools.product(range(-3, 4), range(-6, 6)):
        idx.d = np.array([[first], [second]], dtype=dtype)
        refused = _nnabla_refuses(y)
        if not refused:
            assert y.d[0] == data.d[first, second]
        assert _verdicts(loss, idx) == (refused, refused), (first, second)
    idx.d = np.array([[4], [0]])  # within the largest size, not row 0's
    assert _verdicts(loss, idx) == (True, True) and _nnabla_refuses(y)
    if dtype == np.float32:
        idx.d = np.array([[-3.5], [4.9]])  # truncated to -3 and 4
        assert not _nnabla_refuses(y) and _verdicts(loss, idx) == (False, False)


def test_scatter_nd_bounds_each_row_by_its_output_axis():
    data = _half((2,))
    data.d = [1.0, 2.0]
    idx = _half((2, 2))
    y = F.scatter_nd(data, idx, shape=(3, 4))
    loss = F.sum(y)
    cases = {(2, 3): False, (-3, -4): False, (3, 0): True, (0, 4): True, (-4, 0): True}
    for (first, second), bad in cases.items():
        idx.d = np.array([[first, 0], [second, 0]])
        assert _nnabla_refuses(y) == bad
        assert _verdicts(loss, idx) == (bad, bad), (first, second)


def test_scatter_add_takes_zero_to_n_along_its_axis():
    x0, x1 = _half((3, 2)), _half((1, 2))
    idx = _half((1, 2))
    y = F.scatter_add(x0, idx, x1, axis=0)
    loss = F.sum(y)
    for value, bad in ((0, False), (2, False), (2.5, False), (3, True), (-1, True)):
        idx.d = np.array([[value, 0]])
        assert _nnabla_refuses(y) == bad
        assert _verdicts(loss, idx) == (bad, bad), value


@pytest.mark.parametrize("batch_first", [False, True])
def test_pack_padded_sequence_takes_lengths_up_to_the_time_axis(batch_first):
    """T = 3: lengths 0 to 3 pack as many rows as they say; 4 or -1 pack rows that do not
    add up (nnabla does not check them)."""
    x = _half((2, 3, 2) if batch_first else (3, 2, 2))
    lengths = _half((2,))
    packed, batch_sizes = F.pack_padded_sequence(x, lengths, batch_first=batch_first)
    loss = F.sum(packed)
    for values, bad in (([3, 3], False), ([3, 0], False), ([4, 2], True), ([3, -1], True)):
        lengths.d = values
        with nn.context_scope(cpu_context("half")):
            y, sizes = F.pack_padded_sequence(x, lengths, batch_first=batch_first)
        y.forward()
        assert (sizes.d.sum() != y.shape[0]) == bad  # nnabla packs them wrong, silently
        assert _verdicts(loss, lengths) == (bad, bad), values
    assert batch_sizes.shape == (3,)


class Hot:
    """ids (4, 2) -> OneHot (3, 6) -> affine in cpu:half; a feature of 300 overflows the
    gradients at 2**15, of 1 does not. Row 2's ids are ``ids``."""

    def __init__(self, ids):
        with nn.context_scope(cpu_context("half")), nn.parameter_scope(f"hot{next(SCOPES)}"):
            self.x, self.ids = nn.Variable((4, 18)), nn.Variable((4, 2))
            h = F.reshape(F.one_hot(self.ids, (3, 6)), (4, 18)) * self.x
            w = I.NormalInitializer(0.5, np.random.RandomState(0))
            self.loss = F.mean(PF.affine(h, 1, w_init=w) ** 2)
            self.solver = S.Sgd(0.01)
            self.solver.set_parameters(nn.get_parameters(grad_only=True))
        self.row, self.size = ids, 300.0

    def feed(self):
        self.x.d = self.size * np.random.RandomState(1).randn(4, 18)
        self.ids.d = np.array([[0, 1], [1, 5], self.row, [2, 0]])


@pytest.mark.parametrize("check", ["auto", *sorted(PATHS)])
@pytest.mark.parametrize("row,bad", [([2, 5], False), ([3, 0], True)])
def test_an_overflowing_step_with_a_column_out_of_bounds_is_a_bad_batch(check, row, bad):
    """[3, 0] is within the largest size (6): before, an overflow that backed off."""
    m = Hot(row)
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, m.feed, finite_check=check, policy=DynamicScale(2.0**15)
    )
    rec = u.update()
    assert not rec.update_applied and rec.bad_batch == bad
    assert rec.new_scale == (2.0**15 if bad else 2.0**14)
