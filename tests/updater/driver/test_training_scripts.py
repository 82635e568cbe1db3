"""Paths real training scripts take, on real nnabla graphs (cpu:half unless stated).

Parameters added to the solver later, ``on_overflow="retry"`` with accumulation, batch shapes
and BatchNormalization, scales float16 cannot hold, and nnabla's attributes and documented
usage side by side with ours.
"""

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.solvers as S
import numpy as np
import pytest
from nnabla.experimental.mixed_precision_training import (
    DynamicLossScalingUpdater as NnablaUpdater,
)

import updater.driver.arrays as arrays
import updater.driver.flat as flat
import updater.driver.rounds as rounds
from tests.nnabla_models import (
    TinyBNClassifier,
    TinyClassifier,
    assert_same_values,
    cpu_context,
    param_values,
    solver_state_values,
)
from updater import DynamicScale, HeadroomScale, NnablaLegacy, StaticScale
from updater.driver.updater import DynamicLossScalingUpdater, NonFiniteGradientsError

pytestmark = pytest.mark.nnabla

SPIKE = 1e3  # loss weight that overflows float16 at the scales used here (>= 2**7)


# ---------------------------------------------------------------- parameters added later


class Extended:
    """TinyClassifier plus ``extra`` (a (3,) parameter) whose loss term is ``sum(extra * c)``.

    ``c`` is an input; its gradient at ``extra`` is ``c * seed``, so a large ``c`` overflows
    ONLY ``extra``'s gradient while the loss stays finite. The solver starts without
    ``extra``; :meth:`add_extra` adds it with ``set_parameters(..., reset=False)``.
    """

    def __init__(self, scope="ext", type_config="half", solver="sgd", lr=0.05):
        self.m = TinyClassifier(scope, type_config=type_config, solver=solver, lr=lr)
        with nn.context_scope(self.m.ctx), nn.parameter_scope(scope):
            self.c = nn.Variable((3,))
            self.c.d = 0.5
            self.extra = nn.parameter.get_parameter_or_create(
                "extra", (3,), I.ConstantInitializer(0.25)
            )
            self.loss = self.m.loss + F.sum(self.extra * self.c)

    def add_extra(self):
        self.m.solver.set_parameters({f"{self.m.scope}/extra": self.extra}, reset=False)


@pytest.mark.parametrize("check", ["numpy", "solver"])
def test_overflow_in_a_parameter_added_later_is_caught_by_both_checks(check):
    e = Extended()
    u = DynamicLossScalingUpdater(
        e.m.solver, e.loss, e.m.feeder(), policy=StaticScale(2.0**12), finite_check=check
    )
    u.update()
    e.add_extra()
    e.c.d = 1e3  # extra's gradient 1e3 * 4096 overflows float16; the loss (~400) is finite
    rec = u.update()
    assert not rec.update_applied and rec.loss_finite is True
    assert np.isfinite(e.extra.d).all() and (e.extra.d == 0.25).all()
    e.c.d = 0.5
    assert u.update().update_applied
    assert (e.extra.d < 0.25).all()  # the new parameter trains


def test_clip_norm_absmax_and_error_names_cover_a_parameter_added_later():
    e = Extended(type_config="float", lr=1.0)
    u = DynamicLossScalingUpdater(
        e.m.solver,
        e.loss,
        e.m.feeder(),
        policy=HeadroomScale(init_scale=2.0**4),
        clip_grad_norm=1e-3,
        max_consecutive_nonfinite=1,
    )
    u.update()
    e.add_extra()
    e.c.d = 50.0  # extra's gradient (50) is the largest of all, by far
    before = param_values(e.m.solver.get_parameters())
    rec = u.update()
    after = param_values(e.m.solver.get_parameters())
    assert rec.grad_absmax == 50.0 * rec.scale
    moved = np.concatenate([(before[k] - after[k]).astype(np.float64).ravel() for k in before])
    assert np.linalg.norm(moved) == pytest.approx(1e-3, rel=1e-4)  # the global norm, extra in
    e.c.d = np.array([np.inf, 0.0, 0.0])
    with pytest.raises(NonFiniteGradientsError) as info:
        u.update()
    assert info.value.param_names == ["ext/extra"]


# ---------------------------------------------------------------- retry


def assert_retried_update_equals_a_manual_step(build):
    """``build() -> (model, feeder)``; the feeder's call 3 overflows. The second update of a
    retry-mode run (accum_grad=2) must equal, bit for bit, a manual step on a second copy fed
    calls 2 and 3 again, at the seed that worked."""
    params = []
    for run in ("ours", "manual"):
        nn.clear_parameters()
        m, feed = build()
        u = DynamicLossScalingUpdater(
            m.solver, m.loss, feed, policy=DynamicScale(init_scale=2.0**12, hysteresis=1),
            accum_grad=2, on_overflow="retry",
        )  # fmt: skip
        u.update()
        if run == "ours":
            rec = u.update()
            assert rec.update_applied and rec.attempts > 1 and feed.calls == 4
            seed = rec.scale
        else:
            m.solver.zero_grad()
            for k in (2, 3):
                feed.calls = k
                feed()
                m.loss.forward(clear_no_need_grad=True)
                m.loss.backward(seed, clear_buffer=True)
            m.solver.scale_grad(1.0 / seed)
            m.solver.update()
        params.append(param_values(m.params))
    assert_same_values(*params)


def test_retry_with_accumulation_restores_inputs_that_need_grad():
    """x.need_grad=True (e.g. for input gradients): the old code kept only need_grad=False
    leaves, so every retried round reused the last round's x."""

    def build():
        m = TinyClassifier("nx")
        m.x.need_grad = True
        return m, m.feeder(weights={3: SPIKE})

    assert_retried_update_equals_a_manual_step(build)


class ShapeFeeder:
    """Feeds batches of alternating sizes 8 and 5 (``reset_shape``), spike on call ``spike``."""

    def __init__(self, model, spike):
        self.model, self.spike, self.calls = model, spike, 0

    def batch(self, k):
        rng = np.random.RandomState(k)
        n = 8 if k % 2 == 0 else 5
        x = rng.randn(n, self.model.in_dim)
        t = rng.randint(0, self.model.classes, (n, 1))
        return x, t, SPIKE if k == self.spike else 1.0

    def __call__(self):
        x, t, w = self.batch(self.calls)
        self.model.x.reset_shape(x.shape, force=True)
        self.model.t.reset_shape(t.shape, force=True)
        self.model.x.d, self.model.t.d, self.model.weight.d = x, t, w
        self.calls += 1


@pytest.mark.skipif(
    tuple(int(v) for v in nn.__version__.split(".")[:2]) < (1, 39),
    reason="nnabla < 1.39 raises for a forward after an input's shape changed, updater or not",
)
def test_retry_with_accumulation_handles_rounds_of_different_batch_shapes():
    def build():
        m = TinyClassifier("shape")
        return m, ShapeFeeder(m, spike=3)

    assert_retried_update_equals_a_manual_step(build)


@pytest.mark.parametrize(
    "policy",
    [
        StaticScale(2.0**12),
        DynamicScale(init_scale=2.0**12, hysteresis=2),  # the first overflow does not back off
        DynamicScale(init_scale=2.0**12, min_scale=2.0**12, max_scale=2.0**13, hysteresis=1),
    ],
    ids=["static", "hysteresis", "at-min-scale"],
)
def test_no_retry_at_an_unchanged_scale(policy):
    m = TinyClassifier("same")
    feed = m.feeder(weights={0: SPIKE})
    u = DynamicLossScalingUpdater(m.solver, m.loss, feed, policy=policy, on_overflow="retry")
    rec = u.update()
    assert (rec.attempts, rec.update_applied, u.passes, u.overflows) == (1, False, 1, 1)


def test_every_retry_runs_at_a_strictly_lower_seed():
    m = TinyClassifier("lower")
    feed = m.feeder(weights={0: SPIKE})
    seeds = []
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, feed, policy=DynamicScale(init_scale=2.0**14, hysteresis=1),
        on_overflow="retry",
    )  # fmt: skip
    run = u._rounds.run

    def spy(seed, **kwargs):
        seeds.append(seed)
        return run(seed, **kwargs)

    u._rounds.run = spy
    rec = u.update()
    assert rec.update_applied and len(seeds) == rec.attempts > 2
    assert all(b < a for a, b in zip(seeds, seeds[1:]))


def test_a_non_finite_loss_is_never_retried():
    m = TinyClassifier("nanloss")
    feed = m.feeder(nan_calls=[0])
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, feed, policy=DynamicScale(init_scale=2.0**12, hysteresis=1),
        on_overflow="retry",
    )  # fmt: skip
    rec = u.update()
    assert (rec.attempts, rec.update_applied, rec.loss_finite, u.passes) == (1, False, False, 1)
    assert u.update().update_applied  # the next (clean) batch trains


def bn_statistics(model):
    stats = {k: v for k, v in model.params.items() if k.startswith("bn1/") and not v.need_grad}
    return {k: v.d.copy() for k, v in stats.items()}


@pytest.mark.parametrize("accum", [1, 2])
def test_retried_batches_move_batchnorm_statistics_exactly_once(accum):
    """Reference: one forward per batch. The old code moved them once per attempt (3 times
    for a batch retried twice with accum_grad=1)."""
    spike = {2 * accum - 1: SPIKE}
    stats = []
    for run in ("ours", "forward once"):
        nn.clear_parameters()
        m = TinyBNClassifier("bn", solver="sgd")
        feed = m.feeder(weights=spike)
        u = DynamicLossScalingUpdater(
            m.solver, m.loss, feed, policy=DynamicScale(init_scale=2.0**12, hysteresis=1),
            accum_grad=accum, on_overflow="retry",
        )  # fmt: skip
        u.update()
        if run == "ours":
            assert u.update().attempts >= 3
        else:
            for k in range(accum, 2 * accum):
                m.x.d, m.t.d, m.weight.d = feed.batch(k)
                m.loss.forward(clear_no_need_grad=True)
        stats.append(bn_statistics(m))
    assert len(stats[0]) == 2
    assert_same_values(*stats)


def test_retry_copies_nothing_but_the_round_inputs_when_nothing_overflows(monkeypatch):
    """BatchNorm statistics are copied only when a retry happens; a frozen layer, which no
    forward pass writes, never is (issue 23 item 4: it was copied for every retry)."""
    copied = []
    real_copy, real_save = arrays.copy_array, flat.FlatGraphs.save

    def spy(a):
        copied.append(a.size)
        return real_copy(a)

    def save_spy(self, variables, slot="saved"):
        copied.append(sum(v.size for v in variables))
        return real_save(self, variables, slot)

    monkeypatch.setattr(rounds, "copy_array", spy)  # round inputs
    monkeypatch.setattr(flat.FlatGraphs, "save", save_spy)  # state a forward pass moves
    m = TinyBNClassifier("frozen", solver="sgd")
    with nn.context_scope(m.ctx), nn.parameter_scope("frozen"):
        frozen = nn.parameter.get_parameter_or_create(
            "frozen_w", (64, 64), I.ConstantInitializer(0.0), need_grad=False
        )
    loss = m.loss + F.sum(frozen) * 0.0
    feed = m.feeder(weights={5: SPIKE})
    u = DynamicLossScalingUpdater(
        m.solver, loss, feed, policy=DynamicScale(init_scale=2.0**12, hysteresis=1),
        accum_grad=2, on_overflow="retry", restore_on_skip=False,  # nnabla's behaviour
    )  # fmt: skip
    u.update()
    input_values = m.batch * m.in_dim + m.batch + 1  # x, t and the loss weight
    assert sorted(copied) == sorted([m.batch * m.in_dim, m.batch, 1] * 2)
    assert sum(copied) == 2 * input_values
    copied.clear()
    u.update()
    u.update()  # call 5 (the second round of this update) overflows: one retry
    assert copied.count(12) == 1  # bn1's running mean and variance, once, for the retry
    assert 64 * 64 not in copied


# ---------------------------------------------------------------- seeds float16 cannot hold


def seed_model(type_config="half"):
    """``loss = sum(w * c)`` with c = 1: the gradient of w is exactly 1; Sgd lr 2**-4."""
    with nn.context_scope(cpu_context(type_config)), nn.parameter_scope("seed"):
        c = nn.Variable((4,))
        c.d = 1.0
        w = nn.parameter.get_parameter_or_create("w", (4,), I.ConstantInitializer(0.0))
        loss = F.sum(w * c)
        solver = S.Sgd(2.0**-4)
        solver.set_parameters({"w": w})
    return w, loss, solver


@pytest.mark.parametrize("scale", [2049.0, 1000.1, 17496.0, 3.0])
def test_scales_float16_cannot_hold_still_apply_the_exact_gradient(scale):
    """float16 holds 2049 as 2048, 1000.1 as 1000, 17496 as 17504: unscaling by the scale
    itself applied 0.999512 (not 1) for 2049."""
    w, loss, solver = seed_model()
    u = DynamicLossScalingUpdater(
        solver, loss, policy=StaticScale(scale), finite_check="numpy", max_consecutive_nonfinite=1
    )
    rec = u.update()
    assert rec.update_applied and rec.scale == float(np.float16(scale))
    np.testing.assert_array_equal(w.d, -(2.0**-4))  # lr * exact gradient 1


def test_legacy_factor_3_reaches_unrepresentable_scales_and_stays_exact():
    w, loss, solver = seed_model()
    u = DynamicLossScalingUpdater(solver, loss, scale=8.0, scaling_factor=3.0, N=1, history=9)
    for k in range(8):
        u.update()
        np.testing.assert_array_equal(w.d, -(2.0**-4) * (k + 1))
    scales = [r.scale for r in u.history]
    assert 17504.0 in scales  # 8 * 3**7 = 17496 is held as 17504 by float16


def test_float32_loss_seeds_in_float32():
    w, loss, solver = seed_model("float")
    u = DynamicLossScalingUpdater(solver, loss, policy=StaticScale(1000.1))
    assert u.update().scale == float(np.float32(1000.1))
    np.testing.assert_array_equal(w.d, -(2.0**-4))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"policy": StaticScale(2.0**-25)},
        {"policy": DynamicScale(init_scale=1.0, min_scale=2.0**-26)},
        {"policy": HeadroomScale(init_scale=1.0, min_scale=2.0**-30)},
        {"scale": 1.0, "min_scale": 2.0**-25},
    ],
    ids=["static", "dynamic-floor", "headroom-floor", "legacy-floor"],
)
def test_settings_that_would_seed_zero_are_rejected_saying_why(kwargs):
    w, loss, solver = seed_model()
    with pytest.raises(ValueError, match=r"2\*\*-24.*rounds to 0"):
        DynamicLossScalingUpdater(solver, loss, **kwargs)


def test_a_floorless_policy_that_reaches_a_zero_seed_raises_instead_of_a_silent_zero_step():
    w, loss, solver = seed_model()
    u = DynamicLossScalingUpdater(solver, loss, policy=NnablaLegacy(scale=2.0**-24))
    u._state = u._state._replace(scale=np.float64(2.0**-25))  # where the legacy policy drifts
    with pytest.raises(ValueError, match="rounds to a backward seed of 0"):
        u.update()
    np.testing.assert_array_equal(w.d, 0.0)


# ---------------------------------------------------------------- nnabla's attributes


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


@pytest.mark.parametrize("bad", [float("nan"), -4.0, 2.0**16, 2.0**-25], ids=str)
def test_load_state_dict_rejects_impossible_scales_and_changes_nothing(bad):
    m = TinyClassifier("load")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), N=5)
    u.update()
    state = u.state_dict()
    before = u.state_dict()
    state["scale_state"]["scale"] = bad
    with pytest.raises(ValueError, match="saved scale") as info:
        u.load_state_dict(state)
    assert str(bad) in str(info.value) or repr(bad) in str(info.value)
    assert u.state_dict() == before


def test_load_state_dict_rejects_negative_counters():
    m = TinyClassifier("load2")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder())
    state = u.state_dict()
    state["counters"]["skips"] = -1
    with pytest.raises(ValueError, match="saved skips"):
        u.load_state_dict(state)
    assert u.skips == 0


def test_error_message_counts_calls():
    m = TinyClassifier("err")
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, m.feeder(nan_calls=None), max_consecutive_nonfinite=2
    )
    u.update()
    with pytest.raises(NonFiniteGradientsError, match="2 consecutive update"):
        u.update()
    assert u.consecutive_nonfinite == 2 and u.skips == 2 and u.updates_applied == 0
