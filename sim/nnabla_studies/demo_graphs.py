"""The digits demo's graphs (:mod:`sim.nnabla_studies.demo`): the MLP, the batches, each
variant's training, evaluation and probe graphs with its updater, and the probe's flushed share."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

HIDDEN = 64
BATCH = 32
LEARNING_RATE = 0.05
MOMENTUM = 0.9
LEGACY_ARGS = {"scale": 2.0**10, "scaling_factor": 2.0, "N": 50}
PROBE_SIZE = BATCH  # same batch size as training, so gradients have training magnitudes


class Batches:
    """Data feeder: shuffled epochs over the training set, counting its calls."""

    def __init__(self, x_var, t_var, x, y, seed):
        self.x_var, self.t_var, self.x, self.y = x_var, t_var, x, y
        self.rng = np.random.RandomState(seed)
        self.queue = np.empty(0, dtype=np.int64)
        self.calls = 0

    def __call__(self):
        batch = self.x_var.shape[0]
        if self.queue.size < batch:
            self.queue = np.concatenate([self.queue, self.rng.permutation(len(self.x))])
        idx, self.queue = self.queue[:batch], self.queue[batch:]
        self.x_var.d = self.x[idx]
        self.t_var.d = self.y[idx][..., None]
        self.calls += 1


def mlp(x, seed):
    """The demo's MLP (64-HIDDEN-10, ReLU) on ``x``, its weights drawn from ``seed``."""
    import nnabla.functions as F
    import nnabla.initializer as I
    import nnabla.parametric_functions as PF

    rng = np.random.RandomState(seed)
    w1 = I.NormalInitializer(math.sqrt(2.0 / x.shape[1]), rng=rng)
    w2 = I.NormalInitializer(math.sqrt(1.0 / HIDDEN), rng=rng)
    h = F.relu(PF.affine(x, HIDDEN, w_init=w1, name="fc1"))
    return PF.affine(h, 10, w_init=w2, name="fc2")


def variant_graphs(key, data, seed, loss_weight, contexts) -> SimpleNamespace:
    """The variant's graphs under its own parameter scope: the training loss, the evaluation
    output, the probe's loss in the variant's precision and in float32, the solver and the
    batches; ``updater``: nnabla's or ours for the float16 variants that scale, else None."""
    import nnabla as nn
    import nnabla.functions as F
    import nnabla.solvers as S
    from nnabla.experimental.mixed_precision_training import (
        DynamicLossScalingUpdater as NnablaUpdater,
    )

    from updater import DynamicLossScalingUpdater

    x_train, y_train, x_test, y_test = data
    ctx = contexts["cpu:float" if key == "float32" else "cpu:half"]
    float_ctx = contexts["cpu:float"]
    scope = f"dls_demo/{key}"
    with nn.parameter_scope(scope):
        nn.clear_parameters()
        with nn.context_scope(ctx):
            x = nn.Variable((BATCH, 64))
            t = nn.Variable((BATCH, 1))
            loss = F.mean(F.softmax_cross_entropy(mlp(x, seed), t)) * loss_weight
            x_eval = nn.Variable((len(x_test), 64))
            y_eval = mlp(x_eval, seed)
            x_probe = nn.Variable((PROBE_SIZE, 64))
            t_probe = nn.Variable((PROBE_SIZE, 1))
            probe_loss = F.mean(F.softmax_cross_entropy(mlp(x_probe, seed), t_probe))
            probe_loss = probe_loss * loss_weight
            solver = S.Momentum(LEARNING_RATE / loss_weight, MOMENTUM)
            solver.set_parameters(nn.get_parameters())
        with nn.context_scope(float_ctx):
            ref_loss = F.mean(F.softmax_cross_entropy(mlp(x_probe, seed), t_probe)) * loss_weight
    x_probe.d = x_train[:PROBE_SIZE]
    t_probe.d = y_train[:PROBE_SIZE, None]
    feed = Batches(x, t, x_train, y_train, (seed + 1) % 2**32)
    updater = None
    if key == "fp16_nnabla":
        updater = NnablaUpdater(solver, loss, feed, **LEGACY_ARGS)
    elif key == "fp16_ours":
        updater = DynamicLossScalingUpdater(solver, loss, feed, **LEGACY_ARGS)
    return SimpleNamespace(
        scope=scope,
        loss=loss,
        x_eval=x_eval,
        y_eval=y_eval,
        probe_loss=probe_loss,
        ref_loss=ref_loss,
        solver=solver,
        params=list(solver.get_parameters().values()),
        feed=feed,
        updater=updater,
    )


def flushed_share(g, key, scale: float) -> float:
    """The share of the probe batch's nonzero float32 gradient values that the variant's
    backward at ``scale`` leaves at zero (0 for the float32 variant, the reference)."""
    g.solver.zero_grad()
    g.ref_loss.forward(clear_no_need_grad=True)
    g.ref_loss.backward(1.0, clear_buffer=True)
    g_ref = np.concatenate([p.g.astype(np.float64).ravel() for p in g.params])
    if key == "float32":
        return 0.0  # the variant is the reference
    g.solver.zero_grad()
    g.probe_loss.forward(clear_no_need_grad=True)
    g.probe_loss.backward(scale, clear_buffer=True)
    half = np.concatenate([p.g.astype(np.float64).ravel() for p in g.params])
    nonzero = g_ref != 0
    return float(np.count_nonzero(nonzero & (half == 0)) / max(1, np.count_nonzero(nonzero)))
