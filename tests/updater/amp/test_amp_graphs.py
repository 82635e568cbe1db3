"""updater.amp.rewrite keeps what real scripts put in graphs (issue 23, item 2): stop-gradients
(get_unlinked_variable), straight-through estimators and recompute=True."""

import itertools

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import numpy as np
import pytest

from tests.nnabla_models import cpu_context
from updater import amp

pytestmark = pytest.mark.nnabla
SCOPES = itertools.count()


def _float_lists():
    """Every function in float32: the rebuilt graph computes exactly as the original."""
    return amp.AmpLists(float=amp.function_names())


def _grads(loss, params, forwards=2):
    """Gradients of ``loss`` (a forward repeated so that unlinked leaves hold current data)."""
    for p in params.values():
        p.grad.zero()
    for _ in range(forwards):
        loss.forward()
    loss.backward()
    return {k: p.g.copy() for k, p in params.items()}


@pytest.mark.parametrize("direct_first", [True, False])
def test_a_stop_gradient_stays_one(direct_first):
    """h feeds the loss directly and through an unlinked copy: only the direct path gives a's
    gradient. Before the fix the copy was rebuilt as the linked h when h was rebuilt first
    (a's gradient grew), and read the old graph's h otherwise."""
    rng = np.random.RandomState(0)
    with nn.context_scope(cpu_context("float")), nn.parameter_scope(f"amp_stop_{next(SCOPES)}"):
        x = nn.Variable.from_numpy_array(rng.randn(4, 3).astype(np.float32))
        h = PF.affine(x, 5, w_init=I.NormalInitializer(0.5, rng=rng), name="a")
        u = h.get_unlinked_variable(need_grad=False)
        y = PF.affine(F.relu(u), 2, w_init=I.NormalInitializer(0.5, rng=rng), name="b")
        loss = F.mean(h) + F.mean(y**2) if direct_first else F.mean(y**2) + F.mean(h)
        params = nn.get_parameters()
    before = _grads(loss, params)
    rebuilt = amp.rewrite(loss, _float_lists())
    h.data.zero()  # the rebuilt graph must not read the old graph's h
    after = _grads(rebuilt, params)
    for name in params:
        assert np.array_equal(before[name], after[name]), name
    a_weight = next(k for k in params if k.endswith("a/affine/W"))
    assert np.abs(before[a_weight]).max() > 0


def test_a_straight_through_estimator_passes_the_gradient_as_before():
    """y = z + stop(round(z) - z): forward gives round(z), backward the identity on z."""
    rng = np.random.RandomState(1)
    with nn.context_scope(cpu_context("float")), nn.parameter_scope(f"amp_ste_{next(SCOPES)}"):
        x = nn.Variable.from_numpy_array(rng.randn(4, 3).astype(np.float32) * 3)
        z = PF.affine(x, 5, w_init=I.NormalInitializer(1.0, rng=rng), name="a")
        d = F.round(z) - z
        y = z + d.get_unlinked_variable(need_grad=False)
        loss = F.mean(y**2)
        params = nn.get_parameters()
    d.forward()
    before = _grads(loss, params)
    rebuilt = amp.rewrite(loss, _float_lists())
    after = _grads(rebuilt, params)
    assert np.array_equal(rebuilt.d, loss.d)
    for name in params:
        assert np.array_equal(before[name], after[name]), name


def test_recompute_is_kept():
    rng = np.random.RandomState(2)
    with nn.context_scope(cpu_context("float")), nn.parameter_scope(f"amp_rec_{next(SCOPES)}"):
        x = nn.Variable.from_numpy_array(rng.randn(4, 3).astype(np.float32))
        h = F.tanh(PF.affine(x, 5, w_init=I.NormalInitializer(0.5, rng=rng), name="a"))
        h.recompute = True
        loss = F.mean(PF.affine(h, 2, name="b") ** 2)
    rebuilt = amp.rewrite(loss)
    flags = {f.info.type_name: f.outputs[0].recompute for f in amp.functions(rebuilt)}
    assert flags["Tanh"] and not flags["Mean"]
