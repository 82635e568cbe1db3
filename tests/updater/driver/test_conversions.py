"""Issue 48, finding 3: the 65520 bad-data rule applies to a value only where nnabla converts
it to float16. An in-place Reshape (nnabla's default), an Unlink and an Identity in cpu:half
hand the fed array on in its own dtype, so a 1e6 input they pass to a float32 function stays
finite in plain nnabla; the updater called it bad data, and an ordinary overflow kept the scale
on every finite_check path. Each case is judged against a plain nnabla forward."""

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
from updater.driver import function_roles as roles
from updater.driver.arrays import bad_indices
from updater.driver.checks import PATHS
from updater.driver.value_ranges import input_ranges

pytestmark = pytest.mark.nnabla
SCOPES = itertools.count()
CHECKS = ["auto", *sorted(PATHS)]
ZEROS = np.zeros((2, 2))

LAYOUTS = {  # a function in cpu:half between the fed x (2, 2) and a float32 log
    "reshape in place": lambda x: F.reshape(x, (4,)),
    "reshape copied": lambda x: F.reshape(x, (4,), inplace=False),
    "two reshapes in place": lambda x: F.reshape(F.reshape(x, (4,)), (2, 2)),
    "reshape in place, then copied": lambda x: F.reshape(F.reshape(x, (4,)), (1, 4), False),
    "unlink": lambda x: F.unlink(x),
    "identity": lambda x: F.identity(x),
    "broadcast": lambda x: F.broadcast(F.reshape(x, (1, 4)), (2, 4)),
    "transpose": lambda x: F.transpose(x, (1, 0)),
    "slice": lambda x: F.slice(x, (0, 0), (2, 2)),
    "concatenate": lambda x: F.concatenate(x, x, axis=0),
    "pad": lambda x: F.pad(x, (1, 1)),
    "relu in place": lambda x: F.relu(x, inplace=True),
    "mul_scalar in place": lambda x: F.mul_scalar(x, 1.0, inplace=True),
    "add2 in place": lambda x: F.add2(x, nn.Variable.from_numpy_array(ZEROS), inplace=True),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_guard_calls_a_value_bad_exactly_where_plain_nnabla_makes_it_inf(layout, dtype):
    """x = 1e6 -> the function in cpu:half -> log(|.|) in float32: plain nnabla's loss is inf
    exactly where the function converts x to float16, and the table says bad exactly there.
    A 6e4 x is never bad."""
    x = nn.Variable((2, 2))
    with nn.context_scope(cpu_context("half")):
        y = LAYOUTS[layout](x)
    with nn.context_scope(cpu_context("float")):
        loss = F.sum(F.log(F.abs(y) + 1.0))
    verdicts = []
    for value in (1e6, 6e4):
        x.data.cast(dtype)[...] = value
        loss.forward()
        bad = bool(bad_indices([x.data], input_ranges(loss, [x])))
        assert bad == (not np.isfinite(loss.d)), value
        verdicts.append(bad)
    assert not verdicts[1]


def test_the_table_names_the_functions_that_hand_an_array_on():
    with nn.context_scope(cpu_context("half")):
        x = nn.Variable((2, 2))
        found = {}
        for name in ("reshape in place", "reshape copied", "unlink", "identity", "relu in place"):
            LAYOUTS[name](x).visit(lambda f, n=name: found.setdefault(n, f))
    assert [n for n, f in found.items() if roles.hands_on(f)] == [
        "reshape in place",
        "unlink",
        "identity",
    ]


class Reshaped:
    """x (4, 3) with one 1e6 -> Reshape (cpu:half, in place or not) -> log(1 + |.|) in float32
    -> affine(3) in cpu:half -> SoftmaxCrossEntropy times 100: the
    gradients overflow at 2**15 and not at 2**5; an in-place reshape leaves the loss finite."""

    def __init__(self, inplace):
        rng = np.random.RandomState(0)
        half = cpu_context("half")
        with nn.context_scope(half), nn.parameter_scope(f"reshaped{next(SCOPES)}"):
            self.x, self.t = nn.Variable((4, 3)), nn.Variable((4, 1))
            r = F.reshape(self.x, (4, 3, 1), inplace=inplace)
            with nn.context_scope(cpu_context("float")):
                h = F.log(F.abs(r) + 1.0)
            y = PF.affine(h, 3, w_init=I.NormalInitializer(0.5, rng))
            self.loss = F.mean(F.softmax_cross_entropy(y, self.t)) * 100.0
            self.solver = S.Sgd(1e-4)
            self.solver.set_parameters(nn.get_parameters())

    def feed(self):
        x = np.random.RandomState(1).randn(4, 3)
        x[2, 1] = 1e6
        self.x.d, self.t.d = x, np.array([[1], [0], [2], [0]])

    def plain(self, scale):
        """Plain nnabla's step at ``scale``: (loss finite, gradients finite)."""
        self.feed()
        self.solver.zero_grad()
        self.loss.forward()
        self.loss.backward(scale)
        return bool(np.isfinite(self.loss.d)), not self.solver.check_inf_or_nan_grad()


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("inplace", [True, False])
def test_an_overflow_behind_an_in_place_reshape_backs_off_a_copying_one_is_bad_data(check, inplace):
    m = Reshaped(inplace)
    assert m.plain(2.0**15) == (inplace, False)
    assert m.plain(2.0**5) == (inplace, inplace)  # finite at a low scale: an overflow
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, m.feed, finite_check=check, policy=DynamicScale(2.0**15)
    )
    rec = u.update()
    assert not rec.update_applied and rec.bad_batch == (not inplace)
    assert rec.new_scale == (2.0**14 if inplace else 2.0**15)


def test_labels_handed_on_by_an_in_place_reshape_keep_the_bounds_of_the_loss_that_reads_them():
    """Labels (4,) reshaped in place to (4, 1) for a 70000-class SoftmaxCrossEntropy in cpu:half:
    indices of the loss (69999 and -1 fine, 70000 bad), not float16 values of the Reshape."""
    with nn.context_scope(cpu_context("half")):
        labels, logits = nn.Variable((4,)), nn.Variable((4, 70000))
        loss = F.mean(F.softmax_cross_entropy(logits, F.reshape(labels, (4, 1))))
    [found] = input_ranges(loss, [labels])
    assert found.holds(69999) and found.holds(-1) and not found.holds(70000)
    assert found.why.startswith("an index in [0, 70000), the size of input 0 along axis 1")
