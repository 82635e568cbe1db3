"""The models :mod:`benchmarks.bench_depth` times (and :mod:`benchmarks.bench_calls` and
:mod:`benchmarks.bench_profile` count and profile): 64-wide MLPs of any depth, a convolutional net
with BatchNormalization, each a ``(solver, loss, feed)`` in a parameter scope of its own, and the
bare training step they are measured against."""

from __future__ import annotations

import itertools

import numpy as np

_SCOPES = itertools.count()


def classifier(x, t, y, params, rng):
    """(solver, loss, feed) of a 10-class output ``y``: softmax cross-entropy, Momentum over
    ``params``, and a feeder of random ``x`` and labels ``t``."""
    import nnabla.functions as F
    import nnabla.solvers as S

    loss = F.mean(F.softmax_cross_entropy(y, t))
    solver = S.Momentum(0.01, 0.9)
    solver.set_parameters(params)

    def feed():
        x.d = rng.standard_normal(x.shape)
        t.d = rng.integers(0, 10, t.shape)

    return solver, loss, feed


def mlp(arrays, rng):
    """(solver, loss, feed) of a 64-wide MLP with ``arrays`` parameter arrays."""
    import nnabla as nn
    import nnabla.functions as F
    import nnabla.parametric_functions as PF

    x, t = nn.Variable((16, 64)), nn.Variable((16, 1))
    h = x
    # He initialisation keeps activations and gradients of order one at any depth (smaller
    # weights make them subnormal after a hundred layers, and every step then much slower)
    init = nn.initializer.NormalInitializer((2 / 64) ** 0.5, np.random.RandomState(0))
    with nn.parameter_scope(f"depth{next(_SCOPES)}"):
        for i in range(arrays // 2 - 1):
            h = F.relu(PF.affine(h, 64, w_init=init, name=f"fc{i}"))
        y = PF.affine(h, 10, w_init=init, name="out")
        params = nn.get_parameters()
    return classifier(x, t, y, params, rng)


def conv_bn(blocks, rng):
    """(solver, loss, feed) of a convolutional net: ``blocks`` times 3x3 convolution (16
    channels, no bias), BatchNormalization and ReLU on 8x8 images, then an affine layer; three
    parameter arrays per block, two more for the affine layer."""
    import nnabla as nn
    import nnabla.functions as F
    import nnabla.parametric_functions as PF

    x, t = nn.Variable((16, 3, 8, 8)), nn.Variable((16, 1))
    h = x
    init = nn.initializer.NormalInitializer((2 / 144) ** 0.5, np.random.RandomState(0))
    with nn.parameter_scope(f"convbn{next(_SCOPES)}"):
        for i in range(blocks):
            h = PF.convolution(
                h, 16, (3, 3), pad=(1, 1), with_bias=False, w_init=init, name=f"conv{i}"
            )
            h = F.relu(PF.batch_normalization(h, name=f"bn{i}"))
        y = PF.affine(h, 10, w_init=init, name="out")
        params = nn.get_parameters(grad_only=True)
    return classifier(x, t, y, params, rng)


def bare(solver, loss, feed):
    """The bare training step: no updater."""

    def bare():
        solver.zero_grad()
        feed()
        loss.forward(clear_no_need_grad=True)
        loss.backward(clear_buffer=True)
        solver.update()

    return bare
