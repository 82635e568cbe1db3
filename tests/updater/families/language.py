"""The sequence families of the matrix: a Transformer-style language model through
``updater.amp.rewrite`` and an LSTM sequence classifier.

The language model is the issue's done-when case: a vocabulary of 70000 (ids above 2048, where
float16 stops holding integers, and above 65520, which float16 rounds to inf), one ``ids``
input read twice, shifted (``ids[:, :-1]`` into the embedding, ``ids[:, 1:]`` as the labels),
a padded sequence whose last label is -1 (nnabla's softmax cross-entropy ignores negative
labels), a tiny embedding (2 values per id) and one attention block, built in float32 and
rewritten by ``amp.rewrite`` for the half run.
"""

from __future__ import annotations

import math

import nnabla as nn
import nnabla.functions as F
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np

from tests.nnabla_models import cpu_context
from updater import amp
from updater.amp.rewrite import functions

from .parts import Family, Part, batch_rng, normal, scope, scoped_parameters

VOCABULARY = 70000
"""The language model's vocabulary: ids and labels in [0, 70000)."""
BATCH, LENGTH, WIDTH = 2, 3, 2
"""Sequences per batch, tokens per sequence (after the shift), embedding width."""


class IdsThroughHalfError(AssertionError):
    """The rewritten graph converts the ids to float16 on their way to Embed."""


def language_model(type_config: str = "half") -> Family:
    """ids (2, 4) -> Embed(70000, 2) of ``ids[:, :-1]`` (no position embedding: the causal
    mask orders the tokens) -> one causal single-head attention block with a residual ->
    Affine to 70000 logits per token -> softmax cross-entropy (axis 2) against ``ids[:, 1:]``,
    whose padded entry is -1; the mean over the 6 tokens times 8; Adam.

    Raises:
        IdsThroughHalfError: ``type_config="half"`` and the rewrite computes a function on the
            ids' path to Embed in half: it would round ids above 2048 and make ids >= 65520
            inf, which nnabla's Embed reads out of bounds (a crash), so the family is not run.
    """
    name, rng = "lm", np.random.RandomState(16)
    with scope(name, "float"):
        ids = nn.Variable((BATCH, LENGTH + 1))
        h = PF.embed(ids[:, :-1], VOCABULARY, WIDTH, initializer=normal(rng, 1.0), name="embed")
        q, k, v = (PF.affine(h, WIDTH, base_axis=2, w_init=normal(rng, 0.7), name=n) for n in "qkv")
        causal = np.triu(np.full((LENGTH, LENGTH), -1e4, np.float32), 1)
        mask = nn.Variable.from_numpy_array(np.broadcast_to(causal, (BATCH, LENGTH, LENGTH)))
        scores = F.batch_matmul(q, k, transpose_b=True) * (1 / math.sqrt(WIDTH)) + mask
        att = F.batch_matmul(F.softmax(scores, axis=2), v)
        h = h + PF.affine(att, WIDTH, base_axis=2, w_init=normal(rng, 0.7), name="out")
        logits = PF.affine(h, VOCABULARY, base_axis=2, w_init=normal(rng, 0.7), name="head")
        labels = F.reshape(ids[:, 1:], (BATCH, LENGTH, 1))
        loss = F.mean(F.softmax_cross_entropy(logits, labels, axis=2)) * 8.0
        params = scoped_parameters(name)
        solver = S.Adam(0.01)
        solver.set_parameters(params)
    if type_config == "half":
        with nn.context_scope(cpu_context("float")):
            loss = amp.rewrite(loss)
        check_ids_stay_float(loss)

    def feed(k):
        r = batch_rng(7, k)
        values = r.randint(0, VOCABULARY, (BATCH, LENGTH + 1))
        values[0, 0] = 65530 + k  # one id float16 rounds to inf, one above 2048 in every batch
        values[0, 1] = 4097 + 2 * k
        values[1, -1] = -1  # the second sequence is one token short: its last label is padding
        ids.d = values

    part = Part("main", loss, solver, feed)
    return Family(name, [part], params, extra={"ids": ids})


def embed_ids(loss) -> nn.Variable:
    """The Variable the graph's Embed reads its ids from."""
    [embed] = [f for f in functions(loss) if f.info.type_name == "Embed"]
    return embed.inputs[0]


def check_ids_stay_float(loss) -> None:
    """Raise :class:`IdsThroughHalfError` naming each function on the ids' path to Embed that
    computes in half (its context is nnabla's fact, read from the function)."""
    halves, v = [], embed_ids(loss)
    while v.parent is not None:
        f = v.parent
        if "half" in str(f.context.backend[0]):
            halves.append(f.info.type_name)
        v = f.inputs[0]
    if halves:
        raise IdsThroughHalfError(
            f"amp.rewrite computes {halves} on the ids' path to Embed in half: ids above 2048 "
            "are rounded and ids >= 65520 become inf, which nnabla's Embed reads out of bounds "
            "(it crashes), so the language model is not run (issue 48, finding 2)"
        )


def lstm(type_config: str = "half") -> Family:
    """Sequences of 4 steps of 3 features, 2 per batch -> one LSTM layer (``PF.lstm``, 4
    hidden) from zero states -> Affine of the last step's output to 3 classes; softmax
    cross-entropy summed over the batch times 4; Momentum."""
    name, rng = "lstm", np.random.RandomState(17)
    with scope(name, type_config):
        x, t = nn.Variable((4, 2, 3)), nn.Variable((2, 1))
        h0, c0 = (nn.Variable.from_numpy_array(np.zeros((1, 1, 2, 4), np.float32)) for _ in "hc")
        y, _, _ = PF.lstm(x, h0, c0, w0_init=normal(rng, 0.5), name="lstm")
        logits = PF.affine(y[-1], 3, w_init=normal(rng, 0.5), name="fc")
        loss = F.sum(F.softmax_cross_entropy(logits, t)) * 4.0
        params = scoped_parameters(name)
        solver = S.Momentum(0.05, 0.9)
        solver.set_parameters(params)

    def feed(k):
        r = batch_rng(8, k)
        x.d = r.randn(4, 2, 3)
        t.d = (x.d.sum(axis=(0, 2)) > 0).astype(int).reshape(2, 1) + (x.d[0, :, :1] > 1)

    return Family(name, [Part("main", loss, solver, feed)], params)
