"""A tiny cpu:half model whose state is neither a registered parameter nor in the solver: a
BatchNormalization with statistics made by hand as ``nn.Variable`` and a float64 moving average
that a ``PythonFunction`` writes (given as ``forward_state``). Run as a script it trains, saves or
loads a checkpoint and writes every value, so a test resumes in a new process:

    python -m tests.updater.runtime.stateful_model STEPS OUT.npz CHECK [--load CKPT] [--save CKPT]
"""

from __future__ import annotations

import argparse

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
from nnabla.function import PythonFunction

from tests.nnabla_models import cpu_context
from updater import DynamicLossScalingUpdater, DynamicScale
from updater.runtime.checkpoint import load_checkpoint, save_checkpoint

SPIKES = (3, 7, 8)
"""Calls whose loss weighs 1e3: they overflow at the scales the run reaches (skipped steps)."""


class MovingAverage(PythonFunction):
    """y = x; its forward writes ``0.9 * ema + 0.1 * mean(x, axis=0)`` into its second input, in
    that input's dtype (float64 here), and counts its passes in its third (int32): state no table
    of nnabla's functions knows."""

    @property
    def name(self):
        return "MovingAverage"

    def min_outputs(self):
        return 1

    def setup_impl(self, inputs, outputs):
        outputs[0].reset_shape(inputs[0].shape, True)

    def grad_depends_output_data(self, i, o):
        return False

    def grad_depends_input_data(self, i, j):
        return False

    def forward_impl(self, inputs, outputs):
        x = inputs[0].data.data.astype(np.float64)
        ema = inputs[1].data.data
        inputs[1].data.data = 0.9 * ema + 0.1 * x.mean(axis=0)
        inputs[2].data.data = inputs[2].data.data + 1
        outputs[0].data.data = inputs[0].data.data

    def backward_impl(self, inputs, outputs, propagate_down, accum):
        if propagate_down[0]:
            g = outputs[0].grad.data
            inputs[0].grad.data = inputs[0].grad.data + g if accum[0] else g


class StatefulModel:
    """(affine -> F.batch_normalization with mean and variance made by hand -> tanh) twice ->
    MovingAverage -> affine -> softmax cross-entropy, times a per-batch weight; Adam over the
    affine layers (registered) and BatchNormalization's beta and gamma (``nn.Variable``, in the
    solver alone). The two BatchNormalizations' statistics have the same shape: a resume that
    swapped them would not be bit-identical.

    Args:
        seed (int): seed of the initial weights (the state starts at 0, 1, 0.25 and 0 always).
        finite_check (str): the updater's ``finite_check`` path.
    """

    def __init__(self, seed: int = 0, finite_check: str = "auto"):
        rng = np.random.RandomState(seed)
        ctx = cpu_context("half")
        with nn.context_scope(ctx), nn.parameter_scope("stateful"):
            self.x, self.t, self.weight = nn.Variable((8, 4)), nn.Variable((8, 1)), nn.Variable(())
            h, self.statistics, bn = self.x, [], {}
            for i in range(2):
                h = PF.affine(h, 6, w_init=I.NormalInitializer(0.5, rng=rng), name=f"fc{i}")
                beta = nn.Variable.from_numpy_array(rng.randn(1, 6).astype(np.float32) * 0.1)
                gamma = nn.Variable.from_numpy_array(np.ones((1, 6), np.float32))
                beta.need_grad = gamma.need_grad = True
                bn.update({f"bn{i}/beta": beta, f"bn{i}/gamma": gamma})
                mean = nn.Variable.from_numpy_array(np.zeros((1, 6), np.float32))
                variance = nn.Variable.from_numpy_array(np.ones((1, 6), np.float32))
                self.statistics += [mean, variance]
                h = F.tanh(F.batch_normalization(h, beta, gamma, mean, variance, batch_stat=True))
            self.ema = nn.Variable.from_numpy_array(np.full((1, 6), 0.25, np.float64))
            self.count = nn.Variable.from_numpy_array(np.zeros((1,), np.int32))
            h = MovingAverage(ctx)(h, self.ema, self.count)
            y = PF.affine(h, 3, w_init=I.NormalInitializer(0.5, rng=rng), name="out")
            self.loss = F.mean(F.softmax_cross_entropy(y, self.t)) * self.weight
            self.solver = S.Adam(0.01)
            self.solver.set_parameters({**nn.get_parameters(), **bn})
        policy = DynamicScale(init_scale=2.0**11, growth_interval=3, hysteresis=2)
        self.calls = 0
        self.updater = DynamicLossScalingUpdater(
            self.solver,
            self.loss,
            self.feed,
            policy=policy,
            forward_state=[self.ema, self.count],
            finite_check=finite_check,
        )

    def feed(self):
        rng = np.random.RandomState(500 + self.calls)
        self.x.d = rng.randn(8, 4)
        self.t.d = rng.randint(0, 3, (8, 1))
        self.weight.d = 1e3 if self.calls in SPIKES else 1.0
        self.calls += 1

    def train(self, steps: int) -> list:
        """``steps`` updates from where the updater stands; their (scale, applied) pairs."""
        self.calls = self.updater.batches  # the data resumes where the run stopped
        return [(r.scale, r.update_applied) for r in (self.updater.update() for _ in range(steps))]

    def values(self) -> dict:
        """Every value of the run, each in its own dtype: parameters, solver states and step
        counts, the hand-made statistics, the moving average and the count of passes."""
        out = {f"param/{k}": v.d.copy() for k, v in self.solver.get_parameters().items()}
        for name, state in self.solver.get_states().items():
            out.update({f"solver/{name}/{k}": v.d.copy() for k, v in state.pstate.items()})
            out[f"solver_t/{name}"] = np.array(state.t)
        out.update({f"statistic{i}": v.d.copy() for i, v in enumerate(self.statistics)})
        out["ema"] = np.array(self.ema.data.data)  # float64, as the function keeps it
        out["count"] = np.array(self.count.data.data)
        return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("steps", type=int)
    parser.add_argument("out")
    parser.add_argument("check")
    parser.add_argument("--load")
    parser.add_argument("--save")
    args = parser.parse_args(argv)
    model = StatefulModel(99 if args.load else 0, args.check)  # loading must replace the start
    if args.load:
        load_checkpoint(args.load, model.updater)
    trajectory = model.train(args.steps)
    if args.save:
        save_checkpoint(args.save, model.updater)
    np.savez(args.out, trajectory=np.array(trajectory), **model.values())


if __name__ == "__main__":
    main()
