"""Habits from PyTorch's GradScaler and from hand-written nnabla loops, answered (issue 30): the
GradScaler call sequence, ``get_scale()``, ``update(new_scale=...)``, a forward pass of the
user's own before ``update()``, and the updater's ``repr``; on real nnabla graphs (cpu:half)."""

import nnabla as nn
import nnabla.functions as F
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import TinyBNClassifier, TinyClassifier, cpu_context
from tests.updater.driver.test_forward_state import _ema_net
from updater import DynamicLossScalingUpdater, DynamicScale, StaticScale

pytestmark = pytest.mark.nnabla


def test_the_gradscaler_sequence_is_refused_saying_update_is_a_whole_iteration():
    """PyTorch's habit in a hand-fed nnabla loop: update() after step() would train the batch
    step() trained a second time."""
    m = TinyClassifier("gs")
    feed = m.feeder()
    u = DynamicLossScalingUpdater(m.solver, m.loss)
    with pytest.raises(RuntimeError, match=r"not PyTorch's GradScaler.update\(\)"):
        for _ in range(30):
            feed()
            if u.backward():
                u.unscale()
            u.step()
            u.update()
    assert (feed.calls, u.steps) == (1, 1)  # the first loop's update() was refused


@pytest.mark.parametrize("fed", ["by hand", "by the feeder"])
@pytest.mark.parametrize("every", [2, 3])
def test_stages_by_hand_on_some_iterations_and_update_on_the_others_run_one_each(fed, every):
    """Any pattern of stage iterations and update() iterations, strict alternation included,
    runs one iteration per call, each on its own batch."""
    m = TinyClassifier(f"mix{every}")
    feed = m.feeder()
    u = DynamicLossScalingUpdater(m.solver, m.loss, feed if fed == "by the feeder" else None)
    for i in range(7):
        if fed == "by hand":
            feed()
        if i % every == 0:
            if u.backward():
                u.unscale()
            u.step()
        else:
            u.update()
    assert (feed.calls, u.steps, u.updates_applied) == (7, 7, 7)


def test_get_scale_and_new_scale_point_to_the_scale_attribute():
    m = TinyClassifier("gets")
    feed = m.feeder()
    u = DynamicLossScalingUpdater(m.solver, m.loss, feed, policy=DynamicScale(init_scale=512.0))
    assert u.get_scale() == u.scale == 512.0
    u.scale = 64.0
    assert u.get_scale() == 64.0
    with pytest.raises(TypeError, match=r"assign updater.scale = 1024.0"):
        u.update(new_scale=1024.0)
    assert (feed.calls, u.steps, u.get_scale()) == (0, 0, 64.0)


def test_pytorchs_method_names_name_the_updaters_and_other_names_stay_plain_errors():
    """Issue 52: ``unscale_()`` gave a bare AttributeError."""
    m = TinyClassifier("torchnames")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder())
    with pytest.raises(AttributeError, match=r"GradScaler.unscale_\): here it is unscale\(\)"):
        u.unscale_()
    with pytest.raises(AttributeError, match=r"here it is the enabled option"):
        u.is_enabled()
    with pytest.raises(AttributeError, match=r"has no attribute 'nothing_here'$"):
        u.nothing_here  # noqa: B018
    assert not hasattr(u, "unscale_") and getattr(u, "nothing_here", 3) == 3
    legacy_less = DynamicLossScalingUpdater(m.solver, m.loss, policy=StaticScale(4.0))
    with pytest.raises(AttributeError, match="StaticScale"):  # a property's own message stays
        legacy_less.N  # noqa: B018
    assert u.update().update_applied  # attributes found by ordinary lookup are untouched


def test_a_preset_name_is_a_policy():
    m = TinyClassifier("name")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), policy="deepspeed")
    assert u.policy.hysteresis == 2 and u.scale == 2.0**15
    assert u.update().update_applied


def running_mean(m) -> np.ndarray:
    return m.params["bn1/bn/mean"].d.astype(np.float64).copy()


@pytest.mark.parametrize("forward", [{}, {"clear_no_need_grad": True}])
def test_a_forward_of_the_users_own_before_update_is_refused_before_statistics_move_twice(
    forward,
):
    m = TinyBNClassifier("own")
    feed = m.feeder()
    u = DynamicLossScalingUpdater(m.solver, m.loss)  # no feeder: the inputs are set by hand
    for _ in range(3):  # the loop without a forward of its own runs and reads the loss
        feed()
        u.update()
        assert np.isfinite(float(m.loss.d))
    feed()
    before = running_mean(m)
    m.loss.forward(**forward)
    moved_once = running_mean(m)
    assert not np.array_equal(moved_once, before)
    with pytest.raises(RuntimeError, match=r"loss.forward\(\) ran outside the updater"):
        u.update()
    assert np.array_equal(running_mean(m), moved_once)  # refused before its own forward
    assert u.steps == 3
    u.update()  # the message was given; the next step runs
    assert u.steps == 4


def test_the_staged_backward_refuses_a_forward_of_the_users_own_too():
    m = TinyBNClassifier("ownst")
    feed = m.feeder()
    u = DynamicLossScalingUpdater(m.solver, m.loss)
    feed()
    u.backward()
    u.step()
    feed()
    m.loss.forward()
    with pytest.raises(RuntimeError, match="running statistics"):
        u.backward()


def test_with_a_data_feeder_a_forward_before_the_call_is_taken_as_meant():
    m = TinyBNClassifier("feedown")  # a GAN's generator, run for the discriminator's step
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder())
    u.update()
    m.loss.forward()
    u.update()
    u.data_feeder = None  # from here on the inputs are set by hand: watched
    u.update()
    m.loss.forward()
    with pytest.raises(RuntimeError, match="ran outside the updater"):
        u.update()


def test_a_forward_with_clear_buffer_moves_the_statistics_on_purpose_and_is_not_refused():
    m = TinyBNClassifier("meant")
    feed = m.feeder()
    u = DynamicLossScalingUpdater(m.solver, m.loss)
    feed()
    u.update()
    before = running_mean(m)
    m.loss.forward(clear_buffer=True)
    assert not np.array_equal(running_mean(m), before)
    u.update()
    assert u.steps == 2


def test_a_graph_without_state_takes_a_forward_of_the_users_own():
    m = TinyClassifier("nostate")  # no BatchNormalization: a second forward moves nothing
    feed = m.feeder()
    u = DynamicLossScalingUpdater(m.solver, m.loss)
    for _ in range(3):
        feed()
        m.loss.forward()
        u.update()
    assert u.steps == 3


def test_repr_names_the_scale_the_policy_and_the_counters_on_one_line():
    m = TinyClassifier("repr")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), policy=DynamicScale(hysteresis=2))
    u.update()
    text = repr(u)
    assert text.startswith("DynamicLossScalingUpdater(scale=32768.0, policy=DynamicScale(")
    assert "hysteresis=2" in text and "steps=1, updates_applied=1, skips=0" in text
    assert "\n" not in text and "object at" not in text


def _batchnorm_input(m):
    """The input of ``m``'s BatchNormalization: fc1's output, the trunk of the network."""
    found = []
    m.loss.visit(lambda f: found.append(f) if f.info.type_name == "BatchNormalization" else None)
    return found[0].inputs[0]


@pytest.mark.parametrize("head", ["upstream", "second head"])
def test_a_forward_that_runs_no_state_writing_function_is_not_refused(head):
    """Issue 37: ``feat.forward()`` upstream of BatchNormalization (for logging) and a
    BatchNorm-free second head on the shared trunk move no state: both run, the statistics as
    the updater alone moves them."""
    m = TinyBNClassifier(f"free{head.replace(' ', '')}")
    feat = _batchnorm_input(m)
    with nn.context_scope(m.ctx), nn.parameter_scope(m.scope):
        other = F.sum(PF.affine(feat, 2, name="head2"))
    shown = feat if head == "upstream" else other
    feed = m.feeder()
    u = DynamicLossScalingUpdater(m.solver, m.loss)
    for _ in range(3):
        feed()
        before = running_mean(m)
        shown.forward()
        assert np.array_equal(running_mean(m), before)  # it moved nothing
        u.update()
    assert u.steps == 3


def test_a_forward_that_moves_a_forward_state_variable_twice_is_refused():
    """Issue 37: the watch covers the ``forward_state`` Variables (a user's own function's
    moving average): a forward of the user's own before update() would move it twice."""
    solver, loss, feed, ema = _ema_net()
    u = DynamicLossScalingUpdater(solver, loss, forward_state=[ema])
    feed()
    u.update()
    feed()
    loss.forward()
    with pytest.raises(RuntimeError, match=r"ran outside the updater .*it ran Ema"):
        u.update()


def test_a_gan_whose_discriminators_updater_keeps_its_buffers_runs_the_generators_updater():
    """Issue 37: D's updater (clear_buffer=False, no feeder) runs D(G(z)), and so G's
    BatchNormalization, between G's steps, as a plain nnabla GAN loop does: another updater's
    forward, not one of the user's own, so G's updater takes it."""
    with nn.context_scope(cpu_context("half")), nn.parameter_scope("gan37"):
        z = nn.Variable((8, 4))
        with nn.parameter_scope("g"):
            fake = F.tanh(PF.batch_normalization(PF.affine(z, 4, name="fc"), name="bn"))
        with nn.parameter_scope("d"):
            logit = PF.affine(fake, 1, name="fc")
        loss_d = F.mean(F.sigmoid_cross_entropy(logit, F.constant(0.0, (8, 1))))
        loss_g = F.mean(F.sigmoid_cross_entropy(logit, F.constant(1.0, (8, 1))))
        solvers = {}
        for part in ("g", "d"):
            with nn.parameter_scope(part):
                solvers[part] = S.Adam(0.001)
                solvers[part].set_parameters(nn.get_parameters())
    upd_d = DynamicLossScalingUpdater(solvers["d"], loss_d, clear_buffer=False)
    upd_g = DynamicLossScalingUpdater(solvers["g"], loss_g)
    rng = np.random.RandomState(0)
    for _ in range(3):
        z.d = rng.randn(8, 4)
        upd_d.update()
        upd_g.update()
    assert upd_g.steps == 3
    z.d = rng.randn(8, 4)
    loss_g.forward()  # the user's own forward, no updater between: still refused
    with pytest.raises(RuntimeError, match="ran outside the updater"):
        upd_g.update()
