"""Paths real training scripts take, on real nnabla graphs (cpu:half unless stated).

Parameters added to the solver later, ``on_overflow="retry"`` with accumulation, batch shapes
and BatchNormalization, scales float16 cannot hold, and nnabla's attributes and documented
usage side by side with ours.
"""

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import numpy as np
import pytest

import updater.driver.arrays as arrays
import updater.driver.flat as flat
import updater.driver.rounds as rounds
from tests.nnabla_models import TinyBNClassifier, TinyClassifier, assert_same_values, param_values
from updater import DynamicScale, HeadroomScale, StaticScale
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
            m.solver,
            m.loss,
            feed,
            policy=DynamicScale(init_scale=2.0**12, hysteresis=1),
            accum_grad=2,
            on_overflow="retry",
        )
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
        m.solver,
        m.loss,
        feed,
        policy=DynamicScale(init_scale=2.0**14, hysteresis=1),
        on_overflow="retry",
    )
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
        m.solver,
        m.loss,
        feed,
        policy=DynamicScale(init_scale=2.0**12, hysteresis=1),
        on_overflow="retry",
    )
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
            m.solver,
            m.loss,
            feed,
            policy=DynamicScale(init_scale=2.0**12, hysteresis=1),
            accum_grad=accum,
            on_overflow="retry",
        )
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
        m.solver,
        loss,
        feed,
        policy=DynamicScale(init_scale=2.0**12, hysteresis=1),
        accum_grad=2,
        on_overflow="retry",
        restore_on_skip=False,  # nnabla's behaviour
    )
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
