"""What the updater benchmarks share: the MLP they time and the interleaved timing loop."""

from __future__ import annotations

import time

import numpy as np


def mlp(x, sizes, scope):
    import nnabla as nn
    import nnabla.functions as F
    import nnabla.parametric_functions as PF

    h = x
    with nn.parameter_scope(scope):
        for i, n in enumerate(sizes):
            h = PF.affine(h, n, name=f"fc{i}")
            if i < len(sizes) - 1:
                h = F.relu(h)
    return h


class Model:
    """One copy of the model: graph, solver and a counting data feeder."""

    def __init__(self, scope, in_dim, sizes, batch, rng):
        import nnabla as nn
        import nnabla.functions as F
        import nnabla.solvers as S

        self.x = nn.Variable((batch, in_dim))
        self.t = nn.Variable((batch, 1))
        self.loss = F.mean(F.softmax_cross_entropy(mlp(self.x, sizes, scope), self.t))
        with nn.parameter_scope(scope):
            params = nn.get_parameters()
        self.solver = S.Momentum(0.01, 0.9)
        self.solver.set_parameters(params)
        self.rng = rng
        self.sizes = sizes
        self.batches = 0
        self.poison = None

    def feed(self):
        self.batches += 1
        self.x.d = self.rng.standard_normal(self.x.shape)
        self.t.d = self.rng.integers(0, self.sizes[-1], self.t.shape)
        if self.poison is not None:
            self.x.d.flat[0] = self.poison

    def bare_step(self):
        self.solver.zero_grad()
        self.feed()
        self.loss.forward(clear_no_need_grad=True)
        self.loss.backward(clear_buffer=True)
        self.solver.update()


def interleaved_blocks(steps, iters, blocks, warmup):
    """Per block, the median seconds per call of each of ``steps`` (name -> callable): after
    ``warmup`` rounds, ``iters`` rounds calling every variant once, the order rotating each
    round so that the machine's load hits all alike."""
    names = list(steps)
    for _ in range(warmup):
        for n in names:
            steps[n]()
    medians = []
    for _ in range(blocks):
        times = {n: [] for n in names}
        for i in range(iters):
            k = i % len(names)
            for n in names[k:] + names[:k]:
                t0 = time.perf_counter()
                steps[n]()
                times[n].append(time.perf_counter() - t0)
        medians.append({n: float(np.median(v)) for n, v in times.items()})
    return medians
