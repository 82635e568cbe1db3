"""nnabla's attributes, its docstring's usage and its tutorial's hand-written loop, run side by
side with ours on real nnabla graphs."""

import nnabla as nn
import pytest
from nnabla.experimental.mixed_precision_training import (
    DynamicLossScalingUpdater as NnablaUpdater,
)

from tests.nnabla_models import (
    TinyClassifier,
    assert_same_values,
    param_values,
    solver_state_values,
)
from updater import DynamicScale, NnablaLegacy, StaticScale
from updater.driver.updater import DynamicLossScalingUpdater

pytestmark = pytest.mark.nnabla

SPIKE = 1e3  # loss weight that overflows float16 at the scales used here (>= 2**7)


def test_nnabla_attributes_read_and_write_like_nnabla():
    m = TinyClassifier("attr")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), scale=8.0, N=2000.0)
    o = NnablaUpdater(m.solver, m.loss, m.feeder(), scale=8.0, N=2000.0)
    for name in ("scale", "scaling_factor", "N"):
        assert getattr(u, name) == getattr(o, name), name
    assert u.grads == o.grads == [] and len(u.grads) == 0
    u.scale = 1024.0  # how nnabla users restore the scale when resuming
    assert u.scale == 1024.0 and u.update().scale == 1024.0
    u.N = 3
    u.scaling_factor = 4.0
    assert (u.policy.growth_interval, u.policy.growth_factor, u.policy.backoff_factor) == (
        3,
        4.0,
        0.25,
    )
    for bad, match in ((2.0**16, r"\[1.0, 32768.0\]"), (float("nan"), "nan"), (-4.0, "-4")):
        with pytest.raises(ValueError, match=match):
            u.scale = bad
    assert u.scale == 1024.0
    s = DynamicLossScalingUpdater(m.solver, m.loss, policy=StaticScale(4.0))
    with pytest.raises(AttributeError, match="StaticScale"):
        print(s.N)


def test_no_scale_arguments_means_the_recommended_policy():
    m = TinyClassifier("dflt")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder())
    assert u.policy == DynamicScale() and u.scale == DynamicScale().init_scale
    legacy = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), N=100)
    assert (legacy.scale, legacy.scaling_factor, legacy.N) == (8.0, 2.0, 100)
    assert legacy.policy.hysteresis == 1


def test_nnabla_docstring_usage_runs_unchanged_with_ours():
    """The class docstring's loop, with each updater (one import differs): both train."""
    losses = {}
    for name, cls in (("nnabla", NnablaUpdater), ("ours", DynamicLossScalingUpdater)):
        nn.clear_parameters()
        m = TinyClassifier("doc", type_config="half", solver="momentum", lr=0.1)
        data_feeder = m.feeder()
        updater = cls(m.solver, m.loss, data_feeder)
        for _itr in range(40):
            updater.update()
        m.loss.forward()
        losses[name] = float(m.loss.d)
        assert data_feeder.calls >= 40
    first = TinyClassifier("doc0")
    first.feeder()()
    first.loss.forward()
    assert losses["ours"] < float(first.loss.d)
    assert losses["ours"] == pytest.approx(losses["nnabla"], rel=0.2)


def test_tutorial_hand_written_loop_equals_ours_with_the_legacy_policy_bit_for_bit():
    """nnabla's mixed-precision tutorial loop (skip on inf/NaN, grow when counter > interval)
    is NnablaLegacy's dynamics: ours gives the same parameters and scales, overflows
    included."""
    spikes = {3: SPIKE, 11: SPIKE}
    m = TinyClassifier("tut")
    feed = m.feeder(weights=spikes)
    loss_scale, scaling_factor, counter, interval = 2.0**10, 2.0, 0, 2
    tutorial_scales = []
    for _ in range(16):
        tutorial_scales.append(loss_scale)
        m.solver.zero_grad()
        feed()
        m.loss.forward(clear_no_need_grad=True)
        m.loss.backward(loss_scale, clear_buffer=True)
        if m.solver.check_inf_or_nan_grad():
            loss_scale /= scaling_factor
            counter = 0
        else:
            m.solver.scale_grad(1.0 / loss_scale)
            m.solver.update()
            if counter > interval:
                loss_scale *= scaling_factor
                counter = 0
            counter += 1
    tutorial = param_values(m.params), solver_state_values(m.solver)

    nn.clear_parameters()
    o = TinyClassifier("tut")
    policy = NnablaLegacy(scale=2.0**10, scaling_factor=2.0, N=interval)
    u = DynamicLossScalingUpdater(o.solver, o.loss, o.feeder(weights=spikes), policy=policy)
    ours_scales = [u.update().scale for _ in range(16)]
    assert ours_scales == tutorial_scales
    assert len(set(ours_scales)) > 2  # grew and backed off
    assert_same_values(tutorial[0], param_values(o.params))
    assert_same_values(tutorial[1], solver_state_values(o.solver))


# ---------------------------------------------------------------- loading state
