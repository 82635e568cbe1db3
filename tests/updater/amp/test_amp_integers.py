"""updater.amp.rewrite keeps every id exact on its way to an index input (issue 48, finding 2):
float16 holds the integers only up to 2048, so a half Slice turned token id 4097 into 4096 and
Embed read the wrong row. Real nnabla graphs, rewritten to cpu:half and cpu:float functions."""

import importlib
import itertools

import nnabla as nn
import nnabla.functions as F
import nnabla.parametric_functions as PF
import numpy as np
import pytest

from updater import amp
from updater.amp.integers import integer_functions
from updater.amp.lists import LAYOUT
from updater.runtime.context import get_context

pytestmark = pytest.mark.nnabla

CPU = get_context("cpu:float")  # built in float32; the rewrite makes cpu:half/cpu:float functions
SCOPES = itertools.count()
RNG = np.random.default_rng(48)


def odd_ids(shape, low=4097, high=65503):
    """Odd ids in [low, high]: none of them is a float16 number (spacing 4 and more there)."""
    return RNG.integers(low // 2, high // 2 + 1, shape) * 2 + 1


def half_exact_table(rows, cols=2):
    """An embedding table whose values float16 holds exactly: a row read in half is the row."""
    return nn.Variable.from_numpy_array(
        RNG.standard_normal((rows, cols)).astype(np.float16).astype(np.float32)
    )


def forward(outputs):
    F.sink(*outputs).forward()
    return [o.d.copy() for o in outputs]


def context_of(graph):
    """[(type name, "half"/"float")] of the functions of ``graph``, in order."""
    return [(f.info.type_name, f.context.backend[0][4:]) for f in amp.functions(graph)]


def test_a_shifted_id_above_2048_reads_its_own_row():
    """The issue's minimal form: ids [[4097, 5, 6]], ids[:, :-1] into a 5000-row Embed with
    W[k] = k % 7, summed through an affine. Before the fix the half Slice gave 4096: 6.0."""
    ids_np = np.array([[4097, 5, 6]])
    table = (np.arange(5000) % 7).astype(np.float32).reshape(5000, 1)
    with nn.context_scope(CPU), nn.parameter_scope(f"amp_int_{next(SCOPES)}"):
        ids = nn.Variable.from_numpy_array(ids_np)
        e = PF.embed(ids[:, :-1], 5000, 1, initializer=lambda shape: table)
        out = F.sum(PF.affine(e, 1, w_init=np.ones((2, 1), np.float32), with_bias=False))
    (expected,) = forward([out])
    assert expected == table[ids_np[0, :-1]].sum()  # 2 + 5: float32 reads rows 4097 and 5
    rewritten = amp.rewrite(out, context=CPU)
    assert forward([rewritten]) == [expected]
    assert context_of(rewritten)[:3] == [("Slice", "float"), ("Embed", "half"), ("Affine", "half")]


def language_model(vocab=70000, batch=2, steps=6, dim=2):
    """Time-major tokens, transposed once, shifted: inputs ids[:, :-1] into Embed, labels
    ids[:, 1:] reshaped into SoftmaxCrossEntropy over ``vocab`` classes. The last token of each
    row is a label only: the largest id and a -1 padding label.

    Returns:
        (graph outputs [loss, embedded, logits, per-token loss], input ids, labels, table).
    """
    tokens = odd_ids((steps + 1, batch))
    tokens[-1] = [vocab - 1, -1][:batch]
    table = half_exact_table(vocab, dim)
    with nn.context_scope(CPU), nn.parameter_scope(f"amp_int_{next(SCOPES)}"):
        ids = F.transpose(nn.Variable.from_numpy_array(tokens), (1, 0))
        embedded = F.embed(ids[:, :-1], table)
        h = F.tanh(PF.affine(embedded, 4, base_axis=2, name="h"))
        logits = F.reshape(PF.affine(h, vocab, base_axis=2, name="out"), (-1, vocab))
        per_token = F.softmax_cross_entropy(logits, F.reshape(ids[:, 1:], (-1, 1)))
        loss = F.mean(per_token)
    return [loss, embedded, logits, per_token], tokens.T[:, :-1], tokens.T[:, 1:], table


def test_a_language_model_with_70000_ids_reads_the_float32_rows_and_labels():
    """Every id reaches Embed and every label the loss as in float32; before the fix the
    Transpose, both Slices and the label Reshape were half (ids rounded to a multiple of 4 or
    more, 69999 to inf)."""
    outputs, inputs, labels, table = language_model()
    embedded_32 = forward(outputs)[1]
    assert np.array_equal(embedded_32, table.d[inputs])
    loss, embedded, logits, per_token = amp.rewrite(outputs, context=CPU)
    forward([loss, embedded, logits, per_token])
    assert np.array_equal(embedded.d, embedded_32)
    with nn.context_scope(CPU):  # the same float32 loss on the rewritten logits, true labels
        direct = F.softmax_cross_entropy(
            nn.Variable.from_numpy_array(logits.d),
            nn.Variable.from_numpy_array(labels.reshape(-1, 1)),
        )
    direct.forward()
    assert np.array_equal(per_token.d, direct.d)
    assert per_token.d[-1] == 0 and np.all(per_token.d[:-1] > 0)  # -1: ignored by nnabla
    assert context_of(loss) == [
        ("Transpose", "float"),  # ids
        ("Slice", "float"),  # ids[:, :-1]
        ("Embed", "half"),
        ("Affine", "half"),
        ("Tanh", "half"),
        ("Affine", "half"),
        ("Reshape", "half"),  # the logits: float data, half as before
        ("Slice", "float"),  # ids[:, 1:]
        ("Reshape", "float"),  # the labels
        ("SoftmaxCrossEntropy", "float"),
        ("Mean", "float"),
    ]


# ---------------------------------------------------------------- paths into an index


def _concatenate(ids):
    bos = nn.Variable.from_numpy_array(np.full((ids.shape[0], 1), 4097))
    return F.concatenate(bos, ids[:, :-1], axis=1)


def _split(ids):
    first, second = F.split(ids[:, :2], axis=1)
    return F.stack(second, first, axis=1)


def _gather(ids):
    return F.gather(ids, nn.Variable.from_numpy_array(np.array([1, 0])), axis=0)


def _argmax(ids):
    """Greedy decoding: the argmax of half logits (one-hot weights put it at the ids)."""
    vocab = int(ids.d.max()) + 1
    weights = np.zeros((ids.size, vocab), np.float32)
    weights[np.arange(ids.size), ids.d.ravel()] = 1.0
    eye = nn.Variable.from_numpy_array(np.eye(ids.size, dtype=np.float32))
    logits = F.affine(eye, nn.Variable.from_numpy_array(weights))
    return F.reshape(F.max(logits, axis=1, only_index=True), ids.shape)


PATHS = {  # name: (path from the ids (batch, steps) to Embed's input, the ids it must give)
    "Concatenate": (_concatenate, lambda i: np.concatenate([np.full((2, 1), 4097), i[:, :-1]], 1)),
    "Transpose": (lambda v: F.transpose(F.transpose(v, (1, 0)), (1, 0)), lambda i: i),
    "Broadcast": (lambda v: F.broadcast(v[:1], v.shape), lambda i: np.repeat(i[:1], 2, 0)),
    "Split, Stack": (_split, lambda i: i[:, [1, 0]]),
    "Gather": (_gather, lambda i: i[[1, 0]]),
    "Pad": (
        lambda v: F.pad(v, (0, 1), constant_value=4099),
        lambda i: np.pad(i, ((0, 0), (0, 1)), constant_values=4099),
    ),
    "Max only_index": (_argmax, lambda i: i),
}


@pytest.mark.parametrize("name", list(PATHS))
def test_ids_through_layout_functions_and_an_argmax_reach_embed_exactly(name):
    """Before the fix each layout path was half, next to the half Affine after Embed, and read
    rounded ids. The argmax was exact already (nnabla's ``only_index`` output is an integer
    array) and stays so."""
    path, expected = PATHS[name]
    ids_np = odd_ids((2, 3), high=9999)
    table = half_exact_table(10000)
    with nn.context_scope(CPU), nn.parameter_scope(f"amp_int_{next(SCOPES)}"):
        embedded = F.embed(path(nn.Variable.from_numpy_array(ids_np)), table)
        out = F.sum(PF.affine(embedded, 3, base_axis=2, name="a"))
    assert np.array_equal(forward([embedded])[0], table.d[expected(ids_np)])
    rewritten, rows = amp.rewrite([out, embedded], context=CPU)
    forward([rewritten, rows])
    assert np.array_equal(rows.d, embedded.d)
    assert ("Affine", "half") in context_of(rewritten)


def test_ids_into_one_hot_set_their_own_column():
    """OneHot's input is an index too: before the fix the half Transpose set column 4096 for
    the id 4097."""
    tokens = odd_ids((3, 2), high=4999)
    with nn.context_scope(CPU), nn.parameter_scope(f"amp_int_{next(SCOPES)}"):
        ids = F.reshape(F.transpose(nn.Variable.from_numpy_array(tokens), (1, 0)), (2, 3, 1))
        hot = F.one_hot(ids, (5000,))
        out = F.sum(PF.affine(hot, 2, base_axis=2, name="a"))
    rewritten, columns = amp.rewrite([out, hot], context=CPU)
    forward([rewritten, columns])
    assert np.array_equal(np.argmax(columns.d, axis=2), tokens.T)
    assert ("Affine", "half") in context_of(rewritten)


def test_ids_moved_beside_float_data_stay_exact_forwards():
    """Integer data travels forwards too: ids reshaped and concatenated beside float features
    (an output, not an index) are float32, so the ids in it are exact; the Affine reading it
    is half as before."""
    tokens = odd_ids((4, 2))
    with nn.context_scope(CPU), nn.parameter_scope(f"amp_int_{next(SCOPES)}"):
        ids = F.transpose(nn.Variable.from_numpy_array(tokens), (1, 0))
        h = PF.affine(F.embed(ids, half_exact_table(65504)), 3, name="a")
        both = F.concatenate(F.reshape(ids, (2, 4), inplace=False), h, axis=1)
        out = F.sum(PF.affine(both, 2, name="b"))
    funcs = amp.functions(out)
    flags = dict(zip([f.info.type_name for f in funcs], integer_functions(funcs)))
    assert flags == {
        "Transpose": True,  # backwards from Embed
        "Embed": False,
        "Affine": False,
        "Reshape": True,  # forwards from the Transpose
        "Concatenate": True,
        "Sum": False,
    }
    rewritten, joined = amp.rewrite([out, both], context=CPU)
    forward([rewritten, joined])
    assert np.array_equal(joined.d[:, :4], tokens.T)
    assert context_of(rewritten)[-2:] == [("Affine", "half"), ("Sum", "float")]


# ---------------------------------------------------------------- what stays as it was


def _paints(graph, monkeypatch):
    """(paint now, paint with no integer rule: the rewrite before the fix)."""
    funcs = amp.functions(graph)
    lists = amp.default_lists(CPU)
    now = amp.paint(funcs, lists)
    module = importlib.import_module("updater.amp.rewrite")
    monkeypatch.setattr(module, "integer_functions", lambda fs: [False] * len(fs))
    return now, amp.paint(funcs, lists)


def test_layout_functions_on_float_data_stay_half(monkeypatch):
    """A float model whose hidden values go through every common layout function, Gather by an
    index and a loss with labels: painted exactly as before the fix, the layout ones half."""
    rng = np.random.default_rng(0)
    with nn.context_scope(CPU), nn.parameter_scope(f"amp_int_{next(SCOPES)}"):
        x = nn.Variable.from_numpy_array(rng.standard_normal((4, 6)).astype(np.float32))
        labels = nn.Variable.from_numpy_array(rng.integers(0, 3, (4, 1)))
        h = F.reshape(PF.affine(x, 6, name="a"), (4, 2, 3))
        h = F.concatenate(F.transpose(h, (0, 2, 1)), F.broadcast(h[:, :1, :2], (4, 3, 2)), axis=2)
        first, second = F.split(F.pad(h, (0, 0, 0, 1)), axis=2)[:2]
        h = F.gather(
            F.stack(first, second, axis=1), nn.Variable.from_numpy_array(np.array([3, 2, 1, 0]))
        )
        logits = PF.affine(h, 3, name="b")
        loss = F.mean(F.softmax_cross_entropy(logits, labels))
    now, before = _paints(loss, monkeypatch)
    assert now == before
    funcs = amp.functions(loss)
    layout_half = [f.info.type_name for f, h in zip(funcs, now) if f.info.type_name in LAYOUT and h]
    assert len(layout_half) == sum(f.info.type_name in LAYOUT for f in funcs) >= 9


def test_only_the_id_path_moves_to_float32_in_a_language_model(monkeypatch):
    """In the language model the functions painted differently from before the fix are the
    layout functions carrying ids: the Transpose, both Slices and the label Reshape."""
    outputs, *_ = language_model(vocab=5000)
    now, before = _paints(outputs[0], monkeypatch)
    moved = [f.info.type_name for f, n, b in zip(amp.functions(outputs[0]), now, before) if n != b]
    assert moved == ["Transpose", "Slice", "Slice", "Reshape"]
    assert all(b and not n for n, b in zip(now, before) if n != b)


def test_an_unlinked_copy_of_sliced_ids_is_followed_back_to_the_slice():
    """Embed reading ``ids[:, :-1].get_unlinked_variable()``: the rewrite rebuilds the copy from
    the rebuilt Slice, so that Slice carries the ids too."""
    ids_np = odd_ids((2, 4), high=9999)
    table = half_exact_table(10000)
    with nn.context_scope(CPU), nn.parameter_scope(f"amp_int_{next(SCOPES)}"):
        shifted = nn.Variable.from_numpy_array(ids_np)[:, :-1]
        embedded = F.embed(shifted.get_unlinked_variable(need_grad=False), table)
        out = F.sum(PF.affine(embedded, 3, base_axis=2, name="a")) + F.sum(shifted)
    funcs = amp.functions(out)
    slices = [e for f, e in zip(funcs, integer_functions(funcs)) if f.info.type_name == "Slice"]
    assert slices == [True]
    rewritten, rows = amp.rewrite([out, embedded], context=CPU)
    for _ in range(2):  # the unlinked copy holds the Slice's data from the first forward on
        forward([rewritten, rows])
    assert np.array_equal(rows.d, table.d[ids_np[:, :-1]])
    assert ("Slice", "float") in context_of(rewritten)
