"""Issue 21, part 1: bad data is told apart from overflow. A step whose loss or whose input holds
inf/NaN is a bad batch: skipped, never retried, and the scale does not move (the policy's third
outcome); persistent bad data still raises, naming the inputs."""

import itertools
import math

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import TinyClassifier, cpu_context, param_values
from updater import (
    DynamicLossScalingUpdater,
    DynamicScale,
    HeadroomScale,
    NnablaLegacy,
    NonFiniteGradientsError,
    StaticScale,
)
from updater.driver.arrays import host_reads

_SCOPES = itertools.count()


class ReluNet:
    """affine -> ReLU -> affine in cpu:half: nnabla's ReLU maps a NaN input to 0, so the loss
    stays finite while the first layer's weight gradient is NaN at every scale."""

    def __init__(self, batchnorm=False):
        self.scope = f"relu{next(_SCOPES)}"
        with nn.context_scope(cpu_context("half")), nn.parameter_scope(self.scope):
            self.x, self.t = nn.Variable((8, 4)), nn.Variable((8, 1))
            rng = np.random.RandomState(0)
            h = PF.affine(self.x, 8, w_init=I.NormalInitializer(0.5, rng), name="fc1")
            if batchnorm:
                h = PF.batch_normalization(h, batch_stat=True, name="bn")
            y = PF.affine(F.relu(h), 3, w_init=I.NormalInitializer(0.5, rng), name="fc2")
            self.loss = F.mean(F.softmax_cross_entropy(y, self.t))
            self.params = nn.get_parameters(grad_only=True)
            self.stats = {
                k: v for k, v in nn.get_parameters(grad_only=False).items() if k not in self.params
            }
        self.solver = S.Adam(0.01)
        self.solver.set_parameters(self.params)
        self.calls = 0
        self.nan_calls = set()

    def feed(self):
        rng = np.random.RandomState(self.calls)
        x = rng.randn(8, 4)
        if self.calls in self.nan_calls:
            x[3, 2] = np.nan
        self.x.d, self.t.d = x, rng.randint(0, 3, (8, 1))
        self.calls += 1


@pytest.mark.nnabla
@pytest.mark.parametrize("check", ["numpy", "solver", "nnabla"])
@pytest.mark.parametrize("on_overflow", ["skip", "retry"])
def test_a_nan_input_costs_one_step_never_the_scale(check, on_overflow):
    """The measured case: one NaN in one input, loss finite (1.38), fc1's weight gradient NaN.
    The old updater retried 8 times (9 attempts, 18 passes with accum_grad=2) and ended 256
    times lower; skip mode halved the scale."""
    net = ReluNet()
    net.nan_calls = {2}  # the first round of the second update
    u = DynamicLossScalingUpdater(
        net.solver,
        net.loss,
        net.feed,
        accum_grad=2,
        on_overflow=on_overflow,
        finite_check=check,
        policy=DynamicScale(init_scale=2.0**15),
    )
    assert u.update().update_applied
    before = param_values(net.params)
    rec = u.update()
    assert rec.bad_batch and not rec.update_applied and rec.loss_finite is True
    assert rec.attempts == 1 and u.passes == 4  # no retry
    assert rec.scale == rec.new_scale == u.scale == 2.0**15
    for name, value in param_values(net.params).items():
        np.testing.assert_array_equal(value, before[name])
    rec = u.update()
    assert rec.update_applied and not rec.bad_batch and rec.scale == 2.0**15


@pytest.mark.nnabla
@pytest.mark.parametrize("check", ["numpy", "solver"])
def test_a_bad_batch_with_batchnorm_leaves_scale_and_statistics(check):
    net = ReluNet(batchnorm=True)
    net.nan_calls = {1}
    u = DynamicLossScalingUpdater(net.solver, net.loss, net.feed, finite_check=check)
    u.update()
    stats = {k: np.array(v.d) for k, v in net.stats.items()}
    scale = u.scale
    rec = u.update()
    assert rec.bad_batch and not rec.update_applied and u.scale == scale
    for k, v in net.stats.items():
        np.testing.assert_array_equal(v.d, stats[k])  # the NaN batch left no trace


@pytest.mark.nnabla
def test_device_path_checks_the_inputs_in_its_one_host_read():
    net = ReluNet()
    net.nan_calls = {1}
    u = DynamicLossScalingUpdater(net.solver, net.loss, net.feed, finite_check="solver")
    u.update()
    reads = host_reads()
    rec = u.update()
    assert rec.bad_batch and host_reads() - reads == 1
    reads = host_reads()
    assert not u.update().bad_batch and host_reads() - reads == 1


@pytest.mark.nnabla
def test_an_inf_loss_from_finite_inputs_is_a_bad_batch_too():
    m = TinyClassifier(f"tiny{next(_SCOPES)}")
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, m.feeder(), on_overflow="retry", policy=DynamicScale(2.0**10)
    )
    u.update()
    m.weight.d = math.inf  # an input: the loss weight
    u.data_feeder = lambda: None
    rec = u.update()
    assert rec.bad_batch and rec.attempts == 1 and rec.new_scale == 2.0**10


@pytest.mark.nnabla
def test_persistent_bad_data_raises_and_names_the_inputs():
    net = ReluNet()
    net.nan_calls = set(range(100))
    u = DynamicLossScalingUpdater(net.solver, net.loss, net.feed, max_consecutive_nonfinite=3)
    with pytest.raises(NonFiniteGradientsError) as info:
        for _ in range(3):
            u.update()
    assert info.value.input_names == [
        "input 0 of Affine 'Affine' (8, 4): inf/NaN or not |x| < 65520, read in float16 by "
        "input 0 of Affine 'Affine'"
    ]
    assert "bad data, which no loss scale fixes" in str(info.value)
    assert u.scale == 2.0**15


@pytest.mark.parametrize(
    "policy",
    [StaticScale(8.0), DynamicScale(64.0, growth_interval=3, hysteresis=2), HeadroomScale(64.0)],
)
def test_a_bad_batch_changes_no_counter(policy):
    state = policy.update(policy.init(), True, 1.0)
    assert policy.update(state, False, math.nan, bad_batch=True) == state
    assert policy.update(state, True, 1.0, bad_batch=True) == state
    many = policy.init((3,))
    many = policy.update(many, np.array([True, True, True]), np.full(3, 1.0))
    after = policy.update(
        many,
        np.array([True, False, False]),
        np.array([1.0, 1e9, 1e9]),
        bad_batch=np.array([False, True, False]),
    )
    one = [policy.update(state, True, 1.0), state, policy.update(state, False, 1e9)]
    for i, expected in enumerate(one):
        assert [float(v[i]) for v in after] == [float(v) for v in expected]


def test_nnabla_legacy_takes_a_bad_batch_for_an_overflow_as_nnabla_did():
    p = NnablaLegacy(scale=8.0)
    state = p.init()
    assert p.update(state, True, bad_batch=True) == p.update(state, False)


@pytest.mark.nnabla
@pytest.mark.parametrize("check", ["numpy", "solver"])
def test_an_input_that_holds_inf_on_purpose_can_be_left_unchecked(check):
    """A -inf additive mask is legitimate data. Its steps apply while their gradients are
    finite (the verdict); when they overflow, the mask would make them bad batches (scale kept)
    unless it is in ``unchecked_inputs``: then they back off as overflows."""
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(f"mask{next(_SCOPES)}"):
        x, t = nn.Variable((4, 3)), nn.Variable((4, 1))
        mask = nn.Variable((1, 3))
        mask.d = np.array([[0.0, 0.0, -np.inf]])
        y = PF.affine(x, 3, w_init=I.NormalInitializer(0.5, np.random.RandomState(0))) + mask
        loss = F.mean(F.softmax_cross_entropy(y, t))
        solver = S.Sgd(0.1)
        solver.set_parameters(nn.get_parameters())

    size = [1.0]

    def feed():  # wrong labels: inputs of 200 overflow W's gradients at 2**15 (200 * 2**15 / 4)
        x.d = size[0] * np.random.RandomState(1).randn(4, 3)
        t.d = np.array([[1], [0], [1], [0]])

    masked = DynamicLossScalingUpdater(solver, loss, feed, finite_check=check)
    u = DynamicLossScalingUpdater(solver, loss, feed, finite_check=check, unchecked_inputs=[mask])
    for updater in (masked, u):
        rec = updater.update()
        assert rec.update_applied and not rec.bad_batch
    size[0] = 200.0
    rec = masked.update()
    assert rec.bad_batch and not rec.update_applied and rec.new_scale == rec.scale
    rec = u.update()
    assert not rec.bad_batch and not rec.update_applied and rec.new_scale == rec.scale / 2
    with pytest.raises(TypeError, match="unchecked_inputs must be a list of nnabla.Variable"):
        DynamicLossScalingUpdater(solver, loss, feed, unchecked_inputs=[mask.data])
    other = nn.Variable((1, 3))  # feeds no function of the graph: was accepted, checked nothing
    with pytest.raises(
        ValueError, match=r"unchecked_inputs\[1\] \(shape \(1, 3\)\) is not an input"
    ):
        DynamicLossScalingUpdater(solver, loss, feed, unchecked_inputs=[mask, other])
    with pytest.raises(
        ValueError, match=r"unchecked_inputs\[0\] \(shape \(4, 3\)\) is not an input"
    ):
        DynamicLossScalingUpdater(solver, loss, feed, unchecked_inputs=[y])  # an output


@pytest.mark.nnabla
def test_a_masked_nan_input_with_finite_gradients_is_applied_recorded_and_replayed_as_finite(
    tmp_path,
):
    """ReLU first: a NaN input becomes 0 forward and its gradient 0 backward, so loss and
    gradients are finite: the verdict applies the step (as nnabla's loop does), the trace
    records it as a finite step and the replay follows the same scales."""
    from sim.replay.run import simulate
    from updater import GradientRecorder, Trace

    with nn.context_scope(cpu_context("half")), nn.parameter_scope(f"rec{next(_SCOPES)}"):
        x, t = nn.Variable((8, 4)), nn.Variable((8, 1))
        y = PF.affine(F.relu(x), 3, w_init=I.NormalInitializer(0.5, np.random.RandomState(0)))
        loss = F.mean(F.softmax_cross_entropy(y, t))
        solver = S.Sgd(0.01)
        solver.set_parameters(nn.get_parameters())
    calls = [0]

    def feed():
        rng = np.random.RandomState(calls[0])
        xs = rng.randn(8, 4)
        if calls[0] == 2:
            xs[0, 0] = np.nan
        x.d, t.d = xs, rng.randint(0, 3, (8, 1))
        calls[0] += 1

    policy = DynamicScale(init_scale=2.0**10, growth_interval=2)
    with GradientRecorder(tmp_path / "bad.npz") as rec:
        u = DynamicLossScalingUpdater(solver, loss, feed, policy=policy, recorder=rec)
        records = [u.update() for _ in range(5)]
    assert not records[2].bad_batch and records[2].loss_finite
    assert [r.update_applied for r in records] == [True] * 5
    trace = Trace.load(tmp_path / "bad.npz")
    assert trace.nonfinite.tolist() == [False] * 5
    replay = simulate(policy, trace, runs=1, jitter=0.0)
    assert replay.scale[:, 0].tolist() == [r.scale for r in records]
    assert replay.metrics["final_scale"][0] == records[-1].new_scale
