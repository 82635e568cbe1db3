"""The real nnabla models the studies train in ``cpu:half``, each built with its data, solver and
evaluation (:func:`half_model`):

- ``digits_mlp``: the 64-64-10 ReLU MLP of :mod:`sim.nnabla_studies.demo` on scikit-learn's
  bundled 8x8 digits, with an ordinary loss (weight 1), momentum SGD;
- ``digits_conv_bn``: a small convolutional net with BatchNormalization on the same digits
  (two 3x3 convolutions, each followed by BatchNormalization and ReLU, max pooling, global
  average pooling, an affine head), momentum SGD over ``nn.get_parameters()`` (the running
  statistics are not solver parameters);
- ``sequence_lstm``: nnabla's ``PF.lstm`` (one layer) reading a random 0/1 sequence and
  classifying how many ones it holds (a counting task, generated with a fixed seed), Adam.

Everything is seeded (weights, data split, batch order, generated sequences); the batch order
also has a seed of its own (:func:`half_model`'s ``order``).
"""

from __future__ import annotations

import contextlib
import math
from typing import Callable, Dict

import numpy as np

from sim.nnabla_studies.demo_graphs import BATCH, Batches
from sim.traces.real import MODELS

SEQ_LEN = 10
SEQ_HIDDEN = 16
SEQ_TEST = 256
ATT_LEN, ATT_VOCAB, ATT_DIM, ATT_HEADS, ATT_LAYERS, ATT_BATCH, ATT_TEST = 16, 16, 32, 4, 2, 8, 256
ATT_LR = 0.01
"""The attention model: sequence length, vocabulary, width, heads, blocks, batch, test set,
Adam's learning rate."""


def _accuracy(logits: np.ndarray, y: np.ndarray) -> float:
    """Share of the predictions (the last axis's argmax) equal to ``y``, per token for
    sequences."""
    return float(np.mean(logits.argmax(axis=-1) == y))


# ---------------------------------------------------------------- the models


def _classifier(
    net, train, test, make_solver, seed: int, data: str, arch: str, batch: int = BATCH
) -> Dict:
    """A classifier's loss on batches of ``train`` and its accuracy on ``test``; a target of
    shape ``(n, T)`` is one class per position (the loss is the mean over positions).

    ``net(x, training)`` builds the logits; later calls (the evaluation graph, ``training``
    False; ``training_loss()`` in another context) share the first call's parameters by name.
    The solver holds every parameter that needs a gradient (not BatchNormalization's running
    statistics).
    """
    import nnabla as nn
    import nnabla.functions as F

    (x_train, y_train), (x_test, y_test) = train, test
    x = nn.Variable((batch, *x_train.shape[1:]))
    t = nn.Variable((batch, *y_train.shape[1:], 1))

    def training_loss():  # in the current context, on the batch in x and t
        return F.mean(F.softmax_cross_entropy(net(x, True), t))

    loss = training_loss()
    x_eval = nn.Variable(x_test.shape)
    y_eval = net(x_eval, False)
    solver = make_solver()
    solver.set_parameters(nn.get_parameters())

    def evaluate():
        x_eval.d = x_test
        y_eval.forward(clear_buffer=True)
        return _accuracy(y_eval.d, y_test)

    return {
        "loss": loss,
        "training_loss": training_loss,
        "solver": solver,
        "feed": Batches(x, t, x_train, y_train, seed + 1),
        "evaluate": evaluate,
        "data": data,
        "arch": arch,
    }


def _digits_mlp(seed: int) -> Dict:
    import nnabla.solvers as S

    from sim.nnabla_studies.demo import load_data
    from sim.nnabla_studies.demo_graphs import HIDDEN, LEARNING_RATE, MOMENTUM, mlp

    x_train, y_train, x_test, y_test = load_data(seed)
    return _classifier(
        lambda x, training: mlp(x, seed),
        (x_train, y_train),
        (x_test, y_test),
        lambda: S.Momentum(LEARNING_RATE, MOMENTUM),
        seed,
        f"sklearn digits 8x8, {len(x_train)} train / {len(x_test)} test",
        f"MLP 64-{HIDDEN}-10 ReLU, Momentum({LEARNING_RATE}, {MOMENTUM})",
    )


def _conv_bn_net(x, batch_stat: bool, rng_seed: int):
    import nnabla.functions as F
    import nnabla.initializer as I
    import nnabla.parametric_functions as PF

    rng = np.random.RandomState(rng_seed)

    def he(fan_in):
        return I.NormalInitializer(math.sqrt(2.0 / fan_in), rng=rng)

    h = PF.convolution(x, 8, (3, 3), pad=(1, 1), w_init=he(9), name="conv1")
    h = F.relu(PF.batch_normalization(h, batch_stat=batch_stat, name="bn1"))
    h = F.max_pooling(h, (2, 2))  # 8x4x4
    h = PF.convolution(h, 16, (3, 3), pad=(1, 1), w_init=he(8 * 9), name="conv2")
    h = F.relu(PF.batch_normalization(h, batch_stat=batch_stat, name="bn2"))
    h = F.mean(h, axis=(2, 3))  # global average pooling: (B, 16)
    return PF.affine(h, 10, w_init=I.NormalInitializer(math.sqrt(1.0 / 16), rng=rng), name="fc")


def _digits_conv_bn(seed: int) -> Dict:
    import nnabla.solvers as S

    from sim.nnabla_studies.demo import load_data

    x_train, y_train, x_test, y_test = load_data(seed)
    return _classifier(
        lambda x, training: _conv_bn_net(x, training, seed),  # evaluation: running statistics
        (x_train.reshape(-1, 1, 8, 8), y_train),
        (x_test.reshape(-1, 1, 8, 8), y_test),
        lambda: S.Momentum(0.05, 0.9),
        seed,
        f"sklearn digits 8x8 as 1x8x8 images, {len(x_train)} train / {len(x_test)} test",
        "conv3x3(8)-BN-ReLU-maxpool-conv3x3(16)-BN-ReLU-GAP-affine(10), Momentum(0.05, 0.9)",
    )


def make_sequences(n: int, seed: int):
    """Random 0/1 sequences of length :data:`SEQ_LEN` and their count of ones.

    Returns:
        ``(x, y)``: float32 ``(n, SEQ_LEN)`` and int ``(n,)`` in ``[0, SEQ_LEN]``.
    """
    rng = np.random.RandomState(seed)
    x = (rng.rand(n, SEQ_LEN) < rng.rand(n, 1)).astype(np.float32)  # varied densities
    return x, x.sum(axis=1).astype(np.int64)


def _lstm_net(x, seed: int):
    """``x``: (B, T) of 0/1; returns logits (B, T + 1) from the last LSTM output."""
    import nnabla as nn
    import nnabla.functions as F
    import nnabla.initializer as I
    import nnabla.parametric_functions as PF

    b = x.shape[0]
    seq = F.reshape(F.transpose(x, (1, 0)), (SEQ_LEN, b, 1))  # (T, B, 1)
    h0 = nn.Variable.from_numpy_array(np.zeros((1, 1, b, SEQ_HIDDEN), np.float32))
    c0 = nn.Variable.from_numpy_array(np.zeros((1, 1, b, SEQ_HIDDEN), np.float32))
    rng = np.random.RandomState(seed)
    y, _, _ = PF.lstm(seq, h0, c0, rng=rng, name="lstm")
    last = y[SEQ_LEN - 1]  # (B, H)
    w = I.NormalInitializer(math.sqrt(1.0 / SEQ_HIDDEN), rng=rng)
    return PF.affine(last, SEQ_LEN + 1, w_init=w, name="head")


def _sequence_lstm(seed: int) -> Dict:
    import nnabla.solvers as S

    return _classifier(
        lambda x, training: _lstm_net(x, seed),
        make_sequences(4096, seed),
        make_sequences(SEQ_TEST, seed + 1000),
        lambda: S.Adam(0.01),
        seed,
        f"generated 0/1 sequences of length {SEQ_LEN} (seed {seed}), target: count of ones "
        f"({SEQ_LEN + 1} classes), 4096 train / {SEQ_TEST} test",
        f"PF.lstm(hidden {SEQ_HIDDEN}) + affine({SEQ_LEN + 1}) on the last output, Adam(0.01)",
    )


def make_reversal(n: int, seed: int):
    """Random token sequences and their reversal (the attention model's task).

    Returns:
        ``(x, y)``: int ``(n, ATT_LEN)`` tokens in ``[0, ATT_VOCAB)`` and the same reversed.
    """
    x = np.random.RandomState(seed).randint(0, ATT_VOCAB, size=(n, ATT_LEN))
    return x, x[:, ::-1].copy()


def _attention_net(x, seed: int):
    """``x``: (B, T) tokens; returns logits (B, T, ATT_VOCAB): a token embedding plus a learned
    position embedding, ATT_LAYERS pre-LayerNorm blocks of ATT_HEADS-head self-attention
    (``F.batch_matmul`` and softmax) and a ReLU MLP (4x wide), a final LayerNorm and an affine
    head."""
    import nnabla as nn
    import nnabla.functions as F
    import nnabla.initializer as I
    import nnabla.parametric_functions as PF

    b, t, d, heads = x.shape[0], ATT_LEN, ATT_DIM, ATT_HEADS
    rng = np.random.RandomState(seed)

    def dense(h, n, name, fan_in=d):
        w = I.NormalInitializer(math.sqrt(1.0 / fan_in), rng=rng)
        return PF.affine(h, n, base_axis=2, w_init=w, name=name)

    def norm(h, name):
        return PF.layer_normalization(h, batch_axis=(0, 1), name=name)

    def split_heads(h):  # (B, T, D) -> (B * heads, T, D / heads)
        h = F.transpose(F.reshape(h, (b, t, heads, d // heads)), (0, 2, 1, 3))
        return F.reshape(h, (b * heads, t, d // heads))

    e = I.NormalInitializer(1.0, rng=rng)
    h = PF.embed(x, ATT_VOCAB, d, initializer=e, name="embed")
    pos = nn.parameter.get_parameter_or_create("position", (1, t, d), e((1, t, d)))
    h = h + F.broadcast(pos, (b, t, d))
    for layer in range(ATT_LAYERS):
        with nn.parameter_scope(f"block{layer}"):
            a = norm(h, "ln_attention")
            q, k, v = (split_heads(dense(a, d, name)) for name in ("query", "key", "value"))
            scores = F.batch_matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(d // heads))
            mixed = F.batch_matmul(F.softmax(scores, axis=2), v)  # (B * heads, T, D / heads)
            mixed = F.transpose(F.reshape(mixed, (b, heads, t, d // heads)), (0, 2, 1, 3))
            h = h + dense(F.reshape(mixed, (b, t, d)), d, "out")
            m = F.relu(dense(norm(h, "ln_mlp"), 4 * d, "mlp_in"))
            h = h + dense(m, d, "mlp_out", fan_in=4 * d)
    return dense(norm(h, "ln_final"), ATT_VOCAB, "head")


def _sequence_attention(seed: int) -> Dict:
    import nnabla.solvers as S

    return _classifier(
        lambda x, training: _attention_net(x, seed),
        make_reversal(4096, seed),
        make_reversal(ATT_TEST, seed + 1000),
        lambda: S.Adam(ATT_LR),
        seed,
        f"generated sequences of {ATT_LEN} tokens from {ATT_VOCAB} (seed {seed}), target: the "
        f"sequence reversed, 4096 train / {ATT_TEST} test, accuracy per token",
        f"embedding {ATT_DIM} + learned positions, {ATT_LAYERS} pre-LayerNorm blocks of "
        f"{ATT_HEADS}-head self-attention and a ReLU MLP ({4 * ATT_DIM}), affine head, "
        f"Adam({ATT_LR}), batch {ATT_BATCH}",
        batch=ATT_BATCH,
    )


BUILDERS: Dict[str, Callable[[int], Dict]] = {
    "digits_mlp": _digits_mlp,
    "digits_conv_bn": _digits_conv_bn,
    "sequence_lstm": _sequence_lstm,
    "sequence_attention": _sequence_attention,
}


def batch_order_rng(seed: int, order: int) -> np.random.RandomState:
    """The generator of the batch order ``order`` of a model built with ``seed``: order 0 is
    the builders' own (seed + 1); another order draws other batches from the same weights and
    data."""
    return np.random.RandomState(seed + 1 if order == 0 else [seed + 1, order])


@contextlib.contextmanager
def half_model(name: str, seed: int, order: int = 0):
    """Model ``name`` (a dict of :func:`_classifier`) built in ``cpu:half`` under its own
    parameter scope, with nnabla seeded by ``seed`` and its batches drawn in batch order
    ``order`` (:func:`batch_order_rng`: the same weights and data, other batches); its
    parameters are cleared before and after. The block runs in the ``cpu:half`` context."""
    import nnabla as nn

    from updater import get_context

    if name not in BUILDERS:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    nn.seed(seed)
    with nn.parameter_scope(f"dls_real_traces/{name}"):
        nn.clear_parameters()
        try:
            with nn.context_scope(get_context("cpu:half")):
                model = BUILDERS[name](seed)
                model["feed"].rng = batch_order_rng(seed, order)
                yield model
        finally:
            nn.clear_parameters()
