"""State a forward pass writes, found from the graph (issue 23, item 4), on real cpu:half
graphs: running statistics made by hand move once per batch under retry, as registered ones do."""

import itertools

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest
from nnabla.function import PythonFunction

from tests.nnabla_models import TinyBNClassifier, cpu_context
from updater import DynamicLossScalingUpdater, DynamicScale
from updater.driver.function_roles import state_inputs

pytestmark = pytest.mark.nnabla
SCOPES = itertools.count()


def _hand_made_bn(weight):
    """affine -> F.batch_normalization with nn.Variable mean/var (not PF) -> affine; the loss
    times ``weight`` (30 overflows from 2**15 down to 2**9 and is finite at 2**8)."""
    rng = np.random.RandomState(0)
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(f"hand_bn_{next(SCOPES)}"):
        x = nn.Variable.from_numpy_array(rng.randn(8, 4).astype(np.float32))
        h = PF.affine(x, 6, w_init=I.NormalInitializer(0.5, rng=rng), name="fc1")
        beta = nn.Variable.from_numpy_array(np.zeros((1, 6), np.float32))
        gamma = nn.Variable.from_numpy_array(np.ones((1, 6), np.float32))
        mean = nn.Variable.from_numpy_array(np.zeros((1, 6), np.float32))
        var = nn.Variable.from_numpy_array(np.ones((1, 6), np.float32))
        h = F.batch_normalization(h, beta, gamma, mean, var, batch_stat=True)
        y = PF.affine(F.tanh(h), 1, w_init=I.NormalInitializer(0.5, rng=rng), name="fc2")
        loss = F.sum(y) * weight
        solver = S.Sgd(0.0)
        solver.set_parameters(nn.get_parameters())
    return solver, loss, mean, var


def test_the_graph_names_the_hand_made_statistics():
    _, loss, mean, var = _hand_made_bn(1.0)
    assert {hash(v) for v in state_inputs(loss)} == {hash(mean), hash(var)}


def test_a_retried_batch_moves_hand_made_statistics_once():
    """The step overflows at 2**15 and is retried down to 2**8: the statistics must equal those
    of one forward pass (before the fix they moved once per attempt)."""
    solver, loss, mean, var = _hand_made_bn(30.0)
    policy = DynamicScale(init_scale=2.0**15, growth_interval=1000)
    upd = DynamicLossScalingUpdater(solver, loss, None, policy=policy, on_overflow="retry")
    record = upd.update()
    assert record.attempts == 8 and record.update_applied  # finite at 2**8
    _, once, mean1, var1 = _hand_made_bn(30.0)
    once.forward()
    assert np.array_equal(mean.d, mean1.d) and np.array_equal(var.d, var1.d)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"accum_grad": 2}, {"on_overflow": "retry", "max_retries": 1}, {"restore_on_skip": False}],
)
def test_a_skipped_step_leaves_parameters_solver_and_statistics_as_they_were(kwargs):
    """Issue 21: a batch scaled by 300 overflows at every scale tried and is skipped; its
    forward pass must not stay in BatchNormalization's running statistics (with
    restore_on_skip=False, nnabla's behaviour, it does)."""
    from tests.nnabla_models import (
        TinyBNClassifier,
        assert_same_values,
        param_values,
        solver_state_values,
    )

    model = TinyBNClassifier(f"skip_restore_{next(SCOPES)}", solver="adam")
    calls = 2 if kwargs.get("accum_grad") == 2 else 1
    feed = model.feeder(weights={k: 3e4 for k in range(calls, 40)})
    policy = DynamicScale(init_scale=2.0**10, growth_interval=1000)
    upd = DynamicLossScalingUpdater(model.solver, model.loss, feed, policy=policy, **kwargs)
    assert upd.update().update_applied  # a clean step first
    params, states = param_values(model.params), solver_state_values(model.solver)
    record = upd.update()
    assert not record.update_applied
    if kwargs.get("restore_on_skip", True):
        assert_same_values(param_values(model.params), params)  # running statistics included
        assert_same_values(solver_state_values(model.solver), states)
    else:
        stats = [k for k in params if "bn1/bn/mean" in k or "bn1/bn/var" in k]
        assert stats and not all(
            np.array_equal(param_values(model.params)[k], params[k]) for k in stats
        )


def _bn_net(hand_made: bool):
    """affine -> BatchNormalization (PF's, or F's with nn.Variable statistics) -> affine in
    cpu:half, Adam, the same weights either way; call 1 of the feeder scales x by 300, which
    makes the float16 running variance inf."""
    rng = np.random.RandomState(0)
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(f"bn_net_{next(SCOPES)}"):
        x, t = nn.Variable((8, 4)), nn.Variable((8, 1))
        h = PF.affine(x, 6, w_init=I.NormalInitializer(0.1, rng), name="fc1")
        if hand_made:
            ones, zeros = np.ones((1, 6), np.float32), np.zeros((1, 6), np.float32)
            beta, gamma = nn.Variable.from_numpy_array(zeros), nn.Variable.from_numpy_array(ones)
            mean, var = nn.Variable.from_numpy_array(zeros), nn.Variable.from_numpy_array(ones)
            h = F.batch_normalization(h, beta, gamma, mean, var, batch_stat=True)
        else:
            h = PF.batch_normalization(h, batch_stat=True, name="bn")
        y = PF.affine(F.tanh(h), 3, w_init=I.NormalInitializer(0.5, rng), name="fc2")
        loss = F.mean(F.softmax_cross_entropy(y, t))
        solver = S.Adam(0.01)
        solver.set_parameters(nn.get_parameters(grad_only=True))
    calls = itertools.count()

    def feed():
        call = next(calls)
        r = np.random.RandomState(call)
        x.d = r.randn(8, 4) * (300.0 if call == 1 else 1.0)
        t.d = r.randint(0, 3, (8, 1))

    return solver, loss, feed


@pytest.mark.parametrize("check", ["numpy", "nnabla", "solver", "auto"])
def test_hand_made_statistics_are_state_not_data(check):
    """Issue 28: statistics made by hand are leaves of the graph, but the forward pass writes
    them: they must never be checked as data. The x300 batch makes the running variance inf:
    a bad batch (issue 48), the variance put back; every other batch trains, as with PF's
    registered statistics (before issue 28: on the host paths every batch after the x300 one
    was a "bad batch"; "auto" raised)."""
    runs = []
    for hand_made in (True, False):
        solver, loss, feed = _bn_net(hand_made)
        upd = DynamicLossScalingUpdater(
            solver,
            loss,
            feed,
            finite_check=check,
            on_overflow="retry",
            max_consecutive_nonfinite=3,
        )
        records = [upd.update() for _ in range(5)]
        runs.append([(r.update_applied, r.bad_batch, r.attempts) for r in records])
        assert [r.bad_batch for r in records] == [False, True, False, False, False], records
        assert all(r.update_applied for r in records if not r.bad_batch), records
        assert upd.nonfinite_statistics == 0
    assert runs[0] == runs[1]


class _Ema(PythonFunction):
    """y = x; its forward keeps the mean of x's rows in a moving average (``decay``) written
    into its second input: state that no table of nnabla's functions knows."""

    def __init__(self, ctx, decay=0.5):
        super().__init__(ctx)
        self.decay = decay

    @property
    def name(self):
        return "Ema"

    def min_outputs(self):
        return 1

    def setup_impl(self, inputs, outputs):
        outputs[0].reset_shape(inputs[0].shape, True)

    def grad_depends_output_data(self, i, o):
        return False

    def grad_depends_input_data(self, i, j):
        return False

    def forward_impl(self, inputs, outputs):
        x = inputs[0].data.data.astype(np.float32)
        ema = inputs[1].data.data  # in its own dtype
        inputs[1].data.data = self.decay * ema + (1 - self.decay) * x.mean(axis=0)
        outputs[0].data.data = x

    def backward_impl(self, inputs, outputs, propagate_down, accum):
        if propagate_down[0]:
            g = outputs[0].grad.data
            inputs[0].grad.data = inputs[0].grad.data + g if accum[0] else g


def _ema_net(dtype=np.float32, batchnorm=False):
    rng = np.random.RandomState(0)
    ctx = cpu_context("half")
    with nn.context_scope(ctx), nn.parameter_scope(f"ema_{next(SCOPES)}"):
        x, weight = nn.Variable((8, 4)), nn.Variable(())
        ema = nn.Variable.from_numpy_array(np.full((3,), 1 / 3, dtype))
        h = PF.affine(x, 3, w_init=I.NormalInitializer(0.5, rng), name="fc")
        if batchnorm:  # its statistics are state too, copied with the moving average
            h = PF.batch_normalization(h, batch_stat=True, name="bn")
        loss = F.sum(F.tanh(_Ema(ctx)(h, ema))) * weight
        solver = S.Sgd(0.01)
        solver.set_parameters(nn.get_parameters())
    calls = itertools.count()

    def feed():  # call 1 weighs 1000: every gradient overflows at 2**10
        call = next(calls)
        x.d = np.random.RandomState(call).randn(8, 4)
        weight.d = 1000.0 if call == 1 else 1.0

    return solver, loss, feed, ema


@pytest.mark.parametrize("given", [False, True])
def test_forward_state_puts_back_what_a_users_function_wrote(given):
    """A skipped step puts back a PythonFunction's moving average when it is given as
    forward_state; without it the graph cannot tell, and the skipped batch stays in it."""
    solver, loss, feed, ema = _ema_net()
    policy = DynamicScale(init_scale=2.0**10, growth_interval=1000)
    upd = DynamicLossScalingUpdater(
        solver, loss, feed, policy=policy, forward_state=[ema] if given else []
    )
    assert upd.update().update_applied
    before = ema.d.copy()
    assert not upd.update().update_applied
    assert np.array_equal(ema.d, before) == given
    assert upd.forward_state == ([ema] if given else [])


def test_forward_state_is_checked():
    solver, loss, _, ema = _ema_net()
    with pytest.raises(TypeError, match="forward_state must be a list of nnabla.Variable"):
        DynamicLossScalingUpdater(solver, loss, forward_state=ema)
    with pytest.raises(TypeError, match="forward_state must be a list of nnabla.Variable"):
        DynamicLossScalingUpdater(solver, loss, forward_state=[ema.data])
    with pytest.raises(ValueError, match=r"forward_state\[1\] is the output of Mul"):
        DynamicLossScalingUpdater(solver, loss, forward_state=[ema, loss])


class FeedFailed(Exception):
    pass


@pytest.mark.parametrize("accum_grad", [2, 3])
def test_a_feeder_that_raises_in_a_later_round_leaves_the_statistics_as_they_were(accum_grad):
    """Round 1's forward moved BatchNormalization's running statistics; the feeder then raised in
    the last round: the step never happened, so the statistics must be as before it."""
    model = TinyBNClassifier(f"raise_bn_{next(SCOPES)}")
    feed = model.feeder()
    calls = [0]

    def failing():
        calls[0] += 1
        if calls[0] == accum_grad + accum_grad:  # the last round of the second update
            raise FeedFailed("the data loader died")
        feed()

    upd = DynamicLossScalingUpdater(model.solver, model.loss, failing, accum_grad=accum_grad)
    upd.update()
    stats = {k: v for k, v in model.params.items() if "mean" in k or "var" in k}
    before = {k: v.d.copy() for k, v in stats.items()}
    with pytest.raises(FeedFailed):
        upd.update()
    for name, values in before.items():
        assert np.array_equal(stats[name].d, values), name
    assert upd.update().update_applied  # and training goes on
