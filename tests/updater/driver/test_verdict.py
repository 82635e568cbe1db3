"""One verdict for every step (issue 28, part 1): every case runs on the four ``finite_check``
paths, with ``accum_grad`` 1 and 2, skipping and retrying, against a plain nnabla loop on the
same graph, batch and seed. The rule (:func:`updater.driver.records.verdict`): finite gradients
apply whatever the loss; inf/NaN gradients with an inf/NaN loss or an input bad as the graph
sees it are a bad batch; otherwise an overflow."""

import logging

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import cpu_context
from updater import DynamicLossScalingUpdater, DynamicScale
from updater.driver.records import APPLIED, BAD_BATCH, OVERFLOW, verdict

SEED = 2.0**14
CASES = {
    # case: (what the batch does, the verdict at SEED)
    "clean": ("finite loss and gradients", APPLIED),
    "nan_loss": ("log of a negative input: NaN loss, finite gradients", APPLIED),
    "inf_loss": ("float16 mean of 60000s overflows: inf loss, finite gradients", APPLIED),
    "big_input": (
        "1e6 in v, finite as fed, inf where the half product reads it: tanh keeps "
        "the loss finite, its backward makes NaN",
        BAD_BATCH,
    ),
    "nan_input": ("NaN in x: NaN loss and gradients", BAD_BATCH),
    "overflow": ("x * 200 with wrong labels: W's gradient overflows at 2**14", OVERFLOW),
}


class Model:
    """``mean(CE(affine(x), t)) + mean(log(u)) + mean(z) + mean(tanh(v * gate))`` in cpu:half:
    u and z are inputs whose gradients nobody asks for, so they can make the loss NaN or inf with
    finite gradients; tanh keeps the loss finite for an inf ``v``, not the gradient of gate."""

    def __init__(self):
        with nn.context_scope(cpu_context("half")):
            self.x, self.t = nn.Variable((4, 3)), nn.Variable((4, 1))
            self.u, self.z, self.v = (nn.Variable((4, 1)) for _ in range(3))
            init = I.NormalInitializer(0.5, np.random.RandomState(0))
            y = PF.affine(self.x, 3, w_init=init, name="fc")
            gate = nn.parameter.get_parameter_or_create("gate", (1, 1), I.ConstantInitializer(0.5))
            ce = F.mean(F.softmax_cross_entropy(y, self.t))
            extra = F.mean(F.log(self.u)) + F.mean(self.z) + F.mean(F.tanh(self.v * gate))
            self.loss = ce + extra
        self.params = nn.get_parameters()
        self.solver = S.Sgd(0.01)
        self.solver.set_parameters(self.params)
        self.case = "clean"

    def feed(self):
        rng = np.random.RandomState(1)
        self.x.d, self.t.d = rng.randn(4, 3), np.array([[1], [0], [1], [0]])
        self.u.d, self.z.d, self.v.d = 1.0, 0.0, 0.0
        if self.case == "nan_loss":
            self.u.d = -1.0
        elif self.case == "inf_loss":
            self.z.d = 60000.0
        elif self.case == "big_input":
            self.v.d[0, 0] = 1e6
        elif self.case == "nan_input":
            self.x.d[0, 0] = np.nan
        elif self.case == "overflow":
            self.x.d = 200.0 * self.x.d

    def values(self):
        return {k: p.d.copy() for k, p in self.params.items()}

    def set_values(self, values):
        for k, p in self.params.items():
            p.d = values[k]

    def plain_step(self, seed, accum):
        """nnabla's own loop at ``seed``: the facts the verdict reads, and the parameters after
        the update it would apply."""
        self.solver.zero_grad()
        loss_finite = True
        for _ in range(accum):
            self.feed()
            self.loss.forward(clear_no_need_grad=True)
            loss_finite = loss_finite and bool(np.isfinite(self.loss.d).all())
            self.loss.backward(seed, clear_buffer=True)
        grads_finite = not self.solver.check_inf_or_nan_grad()
        read = [v.d.astype(np.float16) for v in (self.x, self.v)]  # as the half functions do
        inputs_finite = all(np.isfinite(r).all() for r in read)
        if grads_finite:
            self.solver.scale_grad(1.0 / seed)
            self.solver.update()
        return verdict(grads_finite, loss_finite, inputs_finite), self.values()


@pytest.mark.nnabla
@pytest.mark.parametrize("on_overflow", ["skip", "retry"])
@pytest.mark.parametrize("accum", [1, 2])
@pytest.mark.parametrize("check", ["numpy", "nnabla", "solver", "auto"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_verdict_is_one_rule_on_every_path(case, check, accum, on_overflow, caplog):
    m = Model()
    m.case = case
    start = m.values()
    expected, plain_after = m.plain_step(SEED, accum)
    assert expected == CASES[case][1]  # the case does what it says, in nnabla's own loop
    m.set_values(start)
    u = DynamicLossScalingUpdater(
        m.solver,
        m.loss,
        m.feed,
        accum_grad=accum,
        finite_check=check,
        on_overflow=on_overflow,
        policy=DynamicScale(init_scale=SEED, hysteresis=1),
    )
    with caplog.at_level(logging.WARNING):
        rec = u.update()
    retried = expected == OVERFLOW and on_overflow == "retry"
    if retried:  # retried at halved seeds until nnabla's loop also applies it
        seed = rec.scale
        assert rec.update_applied and rec.attempts > 1 and seed == SEED / 2 ** (rec.attempts - 1)
        ours = m.values()
        m.set_values(start)
        assert m.plain_step(seed * 2, accum)[0] == OVERFLOW  # the attempt before overflowed
        m.set_values(start)
        outcome, plain_after = m.plain_step(seed, accum)
        assert outcome == APPLIED
        m.set_values(ours)
    else:
        assert rec.attempts == 1 and rec.scale == SEED
        assert rec.update_applied == (expected == APPLIED)
        assert rec.bad_batch == (expected == BAD_BATCH)
    if expected == BAD_BATCH:
        assert rec.new_scale == SEED and u.overflows == 1  # scale kept, never retried
    if expected == OVERFLOW and not retried:
        assert rec.new_scale == SEED / 2 and not rec.bad_batch
    if rec.update_applied:
        after = {k: p.d for k, p in m.params.items()}
        for k in after:
            np.testing.assert_array_equal(after[k], plain_after[k], err_msg=k)
    elif not rec.update_applied:
        for k, p in m.params.items():
            np.testing.assert_array_equal(p.d, start[k], err_msg=k)
    nonfinite_loss = case in ("nan_loss", "inf_loss")
    assert u.nonfinite_losses == int(nonfinite_loss)
    assert rec.loss_finite == (case not in ("nan_loss", "inf_loss", "nan_input"))
    warned = [r for r in caplog.records if "nonfinite_losses" in r.getMessage()]
    assert len(warned) == int(nonfinite_loss)


@pytest.mark.nnabla
def test_a_nonfinite_loss_on_applied_steps_is_counted_each_time_and_warned_once(caplog):
    m = Model()
    m.case = "nan_loss"
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feed, finite_check="numpy")
    with caplog.at_level(logging.WARNING):
        records = [u.update() for _ in range(3)]
    assert all(r.update_applied and r.loss_finite is False for r in records)
    assert u.nonfinite_losses == 3 and u.skips == 0
    warned = [r.getMessage() for r in caplog.records if "nonfinite_losses" in r.getMessage()]
    assert len(warned) == 1 and "updater.amp.rewrite" in warned[0] and "step 0" in warned[0]
