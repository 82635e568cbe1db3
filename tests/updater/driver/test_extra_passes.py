"""Extra passes leave no trace (issue 28, part 3): after a step whose rounds ran again (a retry,
overflow and flush probes), the gradient of an input with ``need_grad`` is one step's backward,
as in nnabla's own loop; random functions are the one thing probes cannot keep identical, and a
seeded probed run is repeatable."""

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import cpu_context
from updater import DynamicLossScalingUpdater, DynamicScale, GradientRecorder, Probes

SEED = 2.0**14


def build(dropout=False):
    """``CE(affine(x))`` in cpu:half with ``x.need_grad`` (an adversarial input's gradient)."""
    with nn.context_scope(cpu_context("half")):
        x, t = nn.Variable((4, 3), need_grad=True), nn.Variable((4, 1))
        h = F.dropout(x, 0.5) if dropout else x
        init = I.NormalInitializer(0.5, np.random.RandomState(0))
        loss = F.mean(F.softmax_cross_entropy(PF.affine(h, 3, w_init=init, name="fc"), t))
    solver = S.Sgd(0.01)
    solver.set_parameters(nn.get_parameters())
    return x, t, loss, solver


def feeder(x, t, size=1.0):
    def feed():
        rng = np.random.RandomState(1)
        x.d, t.d = size * rng.randn(4, 3), np.array([[1], [0], [1], [0]])

    return feed


def plain_input_grad(x, loss, feed, seed):
    """nnabla's own loop: x's gradient after one forward and backward at ``seed``."""
    x.grad.zero()
    feed()
    loss.forward(clear_no_need_grad=True)
    loss.backward(seed, clear_buffer=True)
    return x.g.copy()


@pytest.mark.nnabla
@pytest.mark.parametrize("check", ["numpy", "nnabla", "solver"])
def test_probes_leave_an_input_gradient_of_one_backward(tmp_path, check):
    x, t, loss, solver = build()
    feed = feeder(x, t)
    start = {k: p.d.copy() for k, p in nn.get_parameters().items()}
    expected = plain_input_grad(x, loss, feed, SEED)
    for k, p in nn.get_parameters().items():
        p.d = start[k]
    recorder = GradientRecorder(tmp_path / "t.npz")
    probes = Probes(overflow=True, flush=True, flush_every=1)  # the first step measured
    policy = DynamicScale(init_scale=SEED)
    u = DynamicLossScalingUpdater(
        solver, loss, feed, policy=policy, recorder=recorder, probes=probes, finite_check=check
    )
    rec = u.update()
    assert rec.update_applied and recorder.probe_passes > 1
    np.testing.assert_array_equal(x.g, expected)  # was the sum over every probe's backward


@pytest.mark.nnabla
@pytest.mark.parametrize("accum", [1, 2])
def test_a_retried_step_leaves_an_input_gradient_of_its_last_attempt(accum):
    x, t, loss, solver = build()
    feed = feeder(x, t, size=200.0)  # overflows at 2**14: retried at lower seeds
    start = {k: p.d.copy() for k, p in nn.get_parameters().items()}
    u = DynamicLossScalingUpdater(
        solver,
        loss,
        feed,
        policy=DynamicScale(init_scale=SEED),
        on_overflow="retry",
        accum_grad=accum,
    )
    rec = u.update()
    assert rec.update_applied and rec.attempts > 1
    got = x.g.copy()
    for k, p in nn.get_parameters().items():
        p.d = start[k]
    expected = sum(plain_input_grad(x, loss, feed, rec.scale) for _ in range(accum))
    assert np.isfinite(got).all()  # was NaN: the overflowed attempts' gradients added in
    np.testing.assert_array_equal(got, expected)


def probed_run(tmp_path, name, probe):
    nn.clear_parameters()
    nn.seed(7)
    x, t, loss, solver = build(dropout=True)
    recorder = GradientRecorder(tmp_path / f"{name}.npz")
    probes = Probes(overflow=probe)
    u = DynamicLossScalingUpdater(solver, loss, feeder(x, t), recorder=recorder, probes=probes)
    for _ in range(3):
        u.update()
    recorder.close()
    return {k: p.d.copy() for k, p in nn.get_parameters().items()}


@pytest.mark.nnabla
def test_probes_draw_new_random_numbers_but_a_seeded_probed_run_repeats(tmp_path):
    first = probed_run(tmp_path, "a", probe=True)
    again = probed_run(tmp_path, "b", probe=True)
    unprobed = probed_run(tmp_path, "c", probe=False)
    for k in first:
        np.testing.assert_array_equal(first[k], again[k])
    assert any(not np.array_equal(first[k], unprobed[k]) for k in first)
