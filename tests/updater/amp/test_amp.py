"""updater.amp: the mixed-precision rewrite of real nnabla graphs on the CPU (cpu:half where the
lists say half, cpu:float elsewhere), its lists, contexts and precision table."""

import logging

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from updater import DynamicLossScalingUpdater, amp
from updater.runtime.context import get_context

pytestmark = pytest.mark.nnabla

CPU = get_context("cpu:float")  # built in float32; rewrite(context=CPU) picks the cpu backend


def computes_in(output):
    """{type name: set of context types} over the functions of the graph."""
    kinds = {}
    for f in amp.functions(output):
        kinds.setdefault(f.info.type_name, set()).add(f.context.backend[0].split(":")[1])
    return kinds


def w(shape_in, seed):
    return I.NormalInitializer(np.sqrt(2.0 / shape_in), rng=np.random.RandomState(seed))


def mlp(batch=16, seed=0):
    rng = np.random.default_rng(seed)
    with nn.context_scope(CPU):
        x = nn.Variable.from_numpy_array(rng.standard_normal((batch, 12)).astype(np.float32))
        t = nn.Variable.from_numpy_array(rng.integers(0, 4, (batch, 1)))
        h = F.relu(PF.affine(x, 16, w_init=w(12, 1), name="fc1"))
        loss = F.mean(F.softmax_cross_entropy(PF.affine(h, 4, w_init=w(16, 2), name="fc2"), t))
    return x, t, loss


def conv_bn(batch=8, seed=0):
    rng = np.random.default_rng(seed)
    with nn.context_scope(CPU):
        x = nn.Variable.from_numpy_array(rng.standard_normal((batch, 1, 6, 6)).astype(np.float32))
        t = nn.Variable.from_numpy_array(rng.integers(0, 3, (batch, 1)))
        h = PF.convolution(x, 4, (3, 3), pad=(1, 1), with_bias=False, w_init=w(9, 1), name="c1")
        h = F.relu(PF.batch_normalization(h, name="bn1"))
        h = F.max_pooling(h, (2, 2))
        loss = F.mean(F.softmax_cross_entropy(PF.affine(h, 3, w_init=w(36, 2), name="fc"), t))
    return loss


def loss_and_grads(loss):
    params = nn.get_parameters()
    for p in params.values():
        p.grad.zero()
    loss.forward()
    loss.backward()
    return float(loss.d), {k: p.g.astype(np.float64) for k, p in params.items()}


def assert_close_to_float(loss, new):
    """Loss and every parameter gradient within float16 tolerance (relative, per array)."""
    ref, g_ref = loss_and_grads(loss)
    got, g_got = loss_and_grads(new)
    assert got == pytest.approx(ref, rel=5e-3, abs=2e-3)
    for name in g_ref:
        err = np.linalg.norm(g_got[name] - g_ref[name])
        assert err <= 1e-2 * np.linalg.norm(g_ref[name]) + 1e-6, name


# ---------------------------------------------------------------- real graphs


def test_mlp_rewrite_matches_float_with_matmuls_in_half_and_the_loss_in_float():
    _, _, loss = mlp()
    new = amp.rewrite(loss, context=CPU)
    assert computes_in(new) == {
        "Affine": {"half"},
        "ReLU": {"half"},  # clear, between two half functions
        "SoftmaxCrossEntropy": {"float"},
        "Mean": {"float"},
    }
    assert set().union(*computes_in(loss).values()) == {"float"}  # the original is untouched
    assert_close_to_float(loss, new)


def test_parameters_and_inputs_are_the_same_variables_and_get_the_gradients():
    x, t, loss = mlp()
    new = amp.rewrite(loss, context=CPU)
    params = nn.get_parameters()
    leaves = [v for f in amp.functions(new) for v in f.inputs if v.parent is None]
    assert set(leaves) == set(params.values()) | {x, t}
    for p in params.values():
        p.grad.zero()
    new.forward()
    new.backward()
    assert all(np.abs(p.g).max() > 0 for p in params.values())
    assert params["fc1/affine/W"].g.dtype == np.float16  # written by the half Affine


def test_conv_bn_rewrite_matches_float_and_moves_the_running_statistics():
    loss = conv_bn()
    new = amp.rewrite(loss, context=CPU)
    kinds = computes_in(new)
    assert kinds["Convolution"] == kinds["Affine"] == {"half"}
    assert kinds["BatchNormalization"] == {"float"}  # float on the CPU (half stats are unsafe)
    assert kinds["ReLU"] == kinds["MaxPooling"] == {"half"}  # clear, next to the half Affine
    stats = nn.get_parameters(grad_only=False)
    mean, var = stats["bn1/bn/mean"], stats["bn1/bn/var"]
    loss.forward()
    moved = mean.d.copy(), var.d.copy()
    mean.d, var.d = 0.0, 1.0
    new.forward()
    assert np.abs(mean.d).max() > 0  # the same Variables, updated by the new graph's forward
    np.testing.assert_allclose(mean.d, moved[0], rtol=1e-2, atol=1e-3)
    np.testing.assert_allclose(var.d, moved[1], rtol=1e-2, atol=1e-3)
    assert_close_to_float(loss, new)


def reshapes(inplace):
    """half Affine -> Reshape -> float Exp -> Reshape -> half Affine, and a second reader."""
    with nn.context_scope(CPU):
        x = nn.Variable.from_numpy_array(np.random.RandomState(0).randn(4, 6).astype(np.float32))
        h = PF.affine(x, 6, w_init=w(6, 1), name="a")
        e = F.exp(F.reshape(h, (4, 3, 2), inplace=inplace))
        out = PF.affine(F.reshape(e, (4, 6), inplace=inplace), 3, w_init=w(6, 2), name="b")
        return F.mean(out) + F.mean(F.reshape(h, (24,), inplace=inplace))


def test_inplace_reshape_at_precision_changes_gives_the_same_numbers_as_a_copy():
    # In nnabla 1.39 only Reshape's inplace is honoured (ReLU's, Add2's... are ignored): the
    # output shares the input's array, which converts between float16 and float32 on demand.
    results = []
    for inplace in (False, True):
        nn.clear_parameters()
        new = amp.rewrite(reshapes(inplace), context=CPU)
        kinds = [(f.info.type_name, f.context.backend[0]) for f in amp.functions(new)]
        assert kinds[:5] == [
            ("Affine", "cpu:half"),
            ("Reshape", "cpu:half"),
            ("Exp", "cpu:float"),
            ("Reshape", "cpu:half"),
            ("Affine", "cpu:half"),
        ]
        results.append(loss_and_grads(new))
    assert results[0][0] == results[1][0]
    for name, g in results[0][1].items():
        np.testing.assert_array_equal(g, results[1][1][name])


def test_multi_output_functions_keep_every_output():
    rng = np.random.default_rng(0)
    with nn.context_scope(CPU):
        x = nn.Variable.from_numpy_array(rng.standard_normal((3, 2, 4)).astype(np.float32))
        h0 = nn.Variable.from_numpy_array(np.zeros((1, 1, 2, 5), np.float32))
        c0 = nn.Variable.from_numpy_array(np.zeros((1, 1, 2, 5), np.float32))
        y, _, c_n = PF.lstm(x, h0, c0, name="lstm")  # h_n unused, c_n used
        a, _, b = F.split(PF.affine(x, 3, name="fc"), axis=1)  # the middle output unused
        loss = F.mean(y) + F.mean(c_n) + F.mean(F.tanh(a) * b)
    new = amp.rewrite(loss, context=CPU)
    kinds = computes_in(new)
    assert kinds["LSTM"] == {"half"} and kinds["Split"] == {"half"}
    assert len(next(f for f in amp.functions(new) if f.info.type_name == "LSTM").outputs) == 3
    assert_close_to_float(loss, new)


def test_a_list_of_outputs_gives_a_list_sharing_one_rebuilt_graph():
    _, _, loss = mlp()
    logits = loss.parent.inputs[0].parent.inputs[0]
    new_loss, new_logits = amp.rewrite([loss, logits], context=CPU)
    assert new_loss.parent.inputs[0].parent.inputs[0] == new_logits


def test_the_updater_trains_the_rewritten_loss():
    _, _, loss = mlp(batch=32)
    new = amp.rewrite(loss, context=CPU)
    solver = S.Momentum(0.05, 0.9)
    solver.set_parameters(nn.get_parameters())
    updater = DynamicLossScalingUpdater(solver, new, None)  # fixed batch: the loss must drop
    losses = []
    for _ in range(30):
        updater.update()
        losses.append(float(new.d))
    assert updater.updates_applied > 20
    assert np.mean(losses[-5:]) < 0.7 * losses[0]


# ---------------------------------------------------------------- painting rules


def painted(output, lists=None):
    funcs = amp.functions(output)
    return [(f.info.type_name, h) for f, h in zip(funcs, amp.paint(funcs, lists or LISTS))]


LISTS = amp.default_lists(CPU)


def test_deny_propagates_forward_through_infer_functions():
    with nn.context_scope(CPU):
        x = nn.Variable((2, 6))
        h = PF.affine(x, 6, name="a")
        out = PF.affine(F.exp(h) + h, 3, name="b")  # exp -> add -> affine
        control = PF.affine(F.relu(h) + h, 3, name="c")  # relu instead of exp
    assert painted(out) == [("Affine", True), ("Exp", False), ("Add2", False), ("Affine", True)]
    assert painted(control)[2] == ("Add2", True)  # between two half functions


def test_tensorflows_documented_example():
    # deny -> infer -> clear -> infer -> clear -> allow -> infer
    with nn.context_scope(CPU):
        x = nn.Variable((2, 6))
        h = F.reshape(F.add_scalar(F.exp(x), 1.0), (2, 3, 2))
        h = PF.affine(F.reshape(F.mul_scalar(h, 2.0), (2, 6)), 3, name="a")
        out = F.add_scalar(h, 1.0)
    halves = [h for _, h in painted(out)]
    assert halves == [False, False, False, False, True, True, False]


def test_infer_is_half_only_between_half_functions():
    with nn.context_scope(CPU):
        x = nn.Variable((2, 6))
        out = F.tanh(PF.affine(F.tanh(PF.affine(F.tanh(x), 4, name="a")), 3, name="b"))
    assert [h for _, h in painted(out)] == [False, True, True, True, False]


def test_clear_functions_feeding_risky_ones_after_a_deny_stay_float():
    with nn.context_scope(CPU):
        x = nn.Variable((2, 6))
        e = F.reshape(F.exp(PF.affine(x, 6, name="a")), (2, 3, 2))
        out = PF.affine(F.reshape(e, (2, 6)) + x, 3, name="b")  # reshape leads to an add
        alone = PF.affine(F.reshape(e, (2, 6)), 3, name="c")  # reshape next to a half affine
    assert [h for _, h in painted(out)][1:5] == [False, False, False, False]
    assert painted(alone)[-2:] == [("Reshape", True), ("Affine", True)]


# ---------------------------------------------------------------- lists


def test_user_lists_override_the_defaults_and_unlisted_types_run_float(caplog):
    _, _, loss = mlp()
    lists = LISTS.updated(float=["Affine"], half=["Mean"])
    assert computes_in(amp.rewrite(loss, lists, context=CPU))["Affine"] == {"float"}
    assert computes_in(amp.rewrite(loss, lists, context=CPU))["Mean"] == {"half"}
    with caplog.at_level(logging.WARNING, logger="updater.amp"):
        new = amp.rewrite(loss, LISTS.updated(remove=["ReLU"]), context=CPU)
    assert computes_in(new)["ReLU"] == {"float"} and "['ReLU']" in caplog.text
    table = amp.describe_lists(lists, CPU)
    assert "| float | Affine | set by the user |" in table
    assert "| half | Mean | set by the user |" in table


@pytest.mark.parametrize(
    "make,exc,fragment",
    [
        (lambda: amp.AmpLists(half=["Afine"]), ValueError, "['Afine']"),
        (lambda: LISTS.updated(float=["relu"]), ValueError, "['relu']"),
        (lambda: amp.AmpLists(half=["Exp"], float=["Exp"]), ValueError, "two lists"),
        (lambda: LISTS.updated(half=["Exp"], clear=["Exp"]), ValueError, "given twice"),
        (lambda: amp.AmpLists(half="Affine"), TypeError, "collection"),
        (lambda: amp.rewrite(nn.Variable((1,)), lists={"half": []}), TypeError, "AmpLists"),
        (lambda: amp.rewrite("loss"), TypeError, "nnabla.Variable"),
    ],
)
def test_bad_lists_and_names_are_rejected(make, exc, fragment):
    with pytest.raises(exc) as info:
        make()
    assert fragment in str(info.value)


def test_default_lists_are_nnabla_names_with_a_reason_each():
    table = amp.describe_lists(context=CPU)
    for name in set().union(*(getattr(LISTS, c) for c in amp.CLASSES)):
        assert name in amp.function_names() and f" {name}" in table
    assert "| float | BatchNormalization, FusedBatchNormalization" in table


# ---------------------------------------------------------------- contexts (no CUDA run)


CUDNN = ["cudnn:half", "cudnn:float", "cuda:half", "cuda:float", "cpu:float"]
CUDNN_FLOAT = ["cudnn:float", "cuda:float", "cpu:float"]
CUDA = ["cuda:half", "cuda:float", "cpu:float"]


@pytest.mark.parametrize(
    "given,half,flt,expected",
    [
        (("cpu:half", "cpu:float"), ["cpu:half", "cpu:float"], ["cpu:float"], None),
        ((CUDNN, "CudaCachedArray", "1"), CUDNN, CUDNN_FLOAT, ("CudaCachedArray", "1")),
        ((CUDNN_FLOAT,), CUDNN, CUDNN_FLOAT, ("CudaCachedArray", "0")),  # defaults filled in
        ((CUDA[1:], "", "2"), CUDA, CUDA[1:], ("CudaCachedArray", "2")),
    ],
)
def test_contexts_follow_the_backend_without_running_it(given, half, flt, expected):
    ctx = get_context("cpu") if expected is None else nn.Context(*given)
    h, f = amp.amp_contexts(ctx)
    assert (list(h.backend), list(f.backend)) == (half, flt)
    where = (h.array_class, h.device_id)
    assert where == (f.array_class, f.device_id) == (expected or (ctx.array_class, ""))


def test_batch_normalization_is_infer_under_cudnn_only():
    cudnn = nn.Context(CUDNN, "CudaCachedArray", "0")
    assert amp.default_lists(cudnn).class_of("BatchNormalization") == "infer"
    assert amp.default_lists(nn.Context(["cuda:half"])).class_of("BatchNormalization") == "float"
    with pytest.raises(ValueError, match="'cpu', 'cuda' or 'cudnn'"):
        amp.amp_contexts(nn.Context(["opencl:float"]))


# ---------------------------------------------------------------- the table


def test_precision_table_counts_multiply_adds_and_the_half_share():
    with nn.context_scope(CPU):
        x = nn.Variable((2, 3, 5, 5))
        c = PF.convolution(x, 4, (3, 3), name="c")  # 2*4*3*3 outputs x 3*3*3
        d = PF.deconvolution(c, 2, (2, 2), name="d")  # 2*4*3*3 inputs x 2*2*2
        b = F.batch_matmul(F.reshape(d, (2, 2, 16)), F.reshape(d, (2, 2, 16)), transpose_b=True)
        out = F.mean(PF.affine(b, 5, name="a"))  # 2 rows x 4*5
    table = amp.precision_table(out)
    for row in ["| Convolution | float | 1944 |", "| Deconvolution | float | 576 |"]:
        assert row in table
    assert "| BatchMatmul | float | 128 |" in table and "| Affine | float | 40 |" in table
    assert table.endswith("0.0% of 2688 multiply-adds run in half.")
    new = amp.rewrite(out, context=CPU)
    assert amp.half_share(new) == 1.0 and "| Mean | float | - |" in amp.precision_table(new)


def test_precision_table_reads_an_all_half_graph():
    with nn.context_scope(get_context("cpu:half")):
        out = F.mean(PF.affine(nn.Variable((2, 3)), 4, name="a"))
    assert "| Mean | half | - |" in amp.precision_table(out) and amp.half_share(out) == 1.0


def test_default_lists_leave_out_functions_the_installed_nnabla_lacks(monkeypatch):
    import updater.amp.lists as amp_lists

    older = amp_lists.function_names() - {"Einsum"}  # nnabla 1.33-1.37 have no Einsum
    monkeypatch.setattr(amp_lists, "function_names", lambda: older)
    lists = amp.default_lists(CPU)
    assert lists.class_of("Einsum") is None and lists.class_of("Affine") == "half"
    with pytest.raises(ValueError, match="Einsum"):  # a name given by hand is still checked
        lists.updated(half=["Einsum"])
