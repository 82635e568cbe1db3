"""``updater.loss = head2`` takes effect while ``unchecked_inputs`` is set (issue 48, finding 6),
as nnabla's updater takes a new loss: the unchecked inputs the new graph lacks no longer matter
(one warning names them), those it reads stay unchecked."""

import warnings

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

from tests.nnabla_models import assert_same_values, cpu_context, param_values
from updater import DynamicLossScalingUpdater

pytestmark = pytest.mark.nnabla

LACKING = "no longer matter"


class TwoHeads:
    """An affine layer over ``x`` in cpu:half; ``masked``: its cross-entropy with a -inf
    additive ``mask`` (legitimate data); ``plain``: without it; ``remasked``: a second graph
    that reads the mask too. ``size`` scales the inputs (200 overflows at 2**15)."""

    def __init__(self, scope):
        with nn.context_scope(cpu_context("half")), nn.parameter_scope(scope):
            self.x, self.t = nn.Variable((4, 3)), nn.Variable((4, 1))
            self.mask = nn.Variable((1, 3))
            self.mask.d = np.array([[0.0, 0.0, -np.inf]])
            w = I.NormalInitializer(0.5, np.random.RandomState(0))
            y = PF.affine(self.x, 3, w_init=w)
            self.masked = F.mean(F.softmax_cross_entropy(y + self.mask, self.t))
            self.plain = F.mean(F.softmax_cross_entropy(y, self.t))
            self.remasked = F.mean(F.softmax_cross_entropy(y * 2.0 + self.mask, self.t))
            self.params = nn.get_parameters()
            self.solver = S.Sgd(0.1)
            self.solver.set_parameters(self.params)
        self.size = 1.0

    def feed(self):
        self.x.d = self.size * np.random.RandomState(1).randn(4, 3)
        self.t.d = np.array([[1], [0], [1], [0]])


def _assigned(cls, unchecked: bool):
    """Two steps on the masked head (``unchecked``: with the mask in ``unchecked_inputs``),
    ``loss = plain``, two steps: the parameters, the warnings of the assignment, the updater
    and the model."""
    nn.clear_parameters()
    m = TwoHeads("heads")
    kwargs = {"unchecked_inputs": [m.mask]} if unchecked else {}
    u = cls(m.solver, m.masked, m.feed, scale=8.0, scaling_factor=2.0, N=2000, **kwargs)
    u.update()
    u.update()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        u.loss = m.plain
    u.update()
    u.update()
    return param_values(m.params), [str(w.message) for w in caught], u, m


def test_a_new_loss_without_the_unchecked_input_takes_effect_as_in_nnabla():
    theirs, _, _, _ = _assigned(NnablaUpdater, unchecked=False)
    ours, said, _, _ = _assigned(DynamicLossScalingUpdater, unchecked=False)
    assert_same_values(theirs, ours)
    assert said == []
    unchecked, said, u, m = _assigned(DynamicLossScalingUpdater, unchecked=True)
    assert u.loss is m.plain and u.updates_applied == 4
    assert_same_values(theirs, unchecked)
    assert len(said) == 1 and "unchecked_inputs[0] (1, 3)" in said[0] and LACKING in said[0]
    assert u.unchecked_inputs == [m.mask]  # kept: it counts again when the loss comes back


def test_a_new_loss_that_reads_the_unchecked_input_keeps_it_unchecked_and_says_nothing():
    m = TwoHeads("reread")
    u = DynamicLossScalingUpdater(m.solver, m.masked, m.feed, unchecked_inputs=[m.mask])
    assert u.update().update_applied
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        u.loss = m.remasked
    assert [str(w.message) for w in caught if LACKING in str(w.message)] == []
    m.size = 200.0  # overflows at 2**15: an overflow (backed off), the mask is no bad data
    rec = u.update()
    assert not rec.update_applied and not rec.bad_batch and rec.new_scale == rec.scale / 2
    checked = DynamicLossScalingUpdater(m.solver, m.remasked, m.feed)
    assert checked.update().bad_batch  # the same step with the mask checked: a bad batch
