"""Automatic mixed precision for nnabla graphs: rebuild a float graph so that each function
computes in float16 or float32, chosen by lists of function type names.

nnabla has no cast function: arrays convert between float16 and float32 when a function reads
them in its context's type. So the rewrite only chooses a context per function. The four classes
and the painting rules follow TensorFlow's ``auto_mixed_precision`` graph rewrite:

- ``half``: always float16 (matrix products, convolutions: the multiply-adds);
- ``infer``: float16 only between two half functions (on a path half -> infer/clear -> half)
  and not downstream of a ``float`` function through infer/clear functions;
- ``float``: always float32 (exp, log, losses, large reductions, statistics);
- ``clear``: no numerical effect on float data (reshape, ReLU, max pooling): float16 when
  connected to a half function through clear functions only, and not tainted by a ``float``
  function.

Whatever the lists say, the functions that carry indices stay float32 (float16 holds the
integers only up to 2048): the functions producing an index input (Embed's ids, a loss's
labels, ...) and the layout functions (Slice, Reshape, Concatenate, ...) moving integer data
into one or out of one (:mod:`updater.amp.integers`).

Function types in no list compute in float32, and :func:`rewrite` logs them. See
:func:`describe_lists` for the default lists and the reason for each entry; the lists and the
contexts are defined in :mod:`updater.amp.lists`.

Contexts come from the current default context (or ``context=``): ``cpu`` gives
``cpu:half``/``cpu:float``; ``cudnn`` and ``cuda`` give the backend lists of nnabla-ext-cuda's
``type_config="half"``/``"float"`` contexts. The CUDA path builds the same graphs but was not
run here (no GPU): only the Context objects were checked. nnabla's CPU half kernels accumulate
sums in float16 (also in Affine and Convolution), so on the CPU the rewrite is a numerical
testbed, not a speed-up.
"""

from __future__ import annotations

import logging
from typing import Dict, List

import nnabla as nn
import nnabla.function as NF

from .integers import integer_functions
from .lists import AmpLists, amp_contexts, check_lists, default_lists

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------- the graph


def _as_list(output) -> List[nn.Variable]:
    outputs = list(output) if isinstance(output, (list, tuple)) else [output]
    if not outputs or not all(isinstance(v, nn.Variable) for v in outputs):
        raise TypeError(f"output must be an nnabla.Variable or a list of them, got {output!r}")
    return outputs


def functions(output) -> list:
    """The functions that ``output`` (a Variable or a list of them) depends on, each once,
    every function after the functions it reads from."""
    order, seen = [], set()
    stack = [(v.parent, False) for v in reversed(_as_list(output)) if v.parent is not None]
    while stack:  # depth-first, iterative: deep graphs do not hit Python's recursion limit
        f, done = stack.pop()
        if done:
            order.append(f)
        elif f not in seen:
            seen.add(f)
            stack.append((f, True))
            stack.extend((v.parent, False) for v in reversed(f.inputs) if v.parent is not None)
    return order


def _sources_first(funcs: list, halves: List[bool]) -> List[tuple]:
    """``(function, half)`` pairs in an order where a function reading an unlinked copy of
    another function's output comes after that function (nnabla's graph order does not see
    that link), so the rebuilt copy can be unlinked from the rebuilt source; stable otherwise,
    and the given order where such links form a cycle."""
    producer = {o: i for i, f in enumerate(funcs) for o in f.outputs}  # copies hash equal
    needs = [{producer[v] for v in f.inputs if v in producer} - {i} for i, f in enumerate(funcs)]
    order, done, ready = [], set(), sorted(i for i, n in enumerate(needs) if not n)
    while ready:
        i = ready.pop(0)
        order.append(i)
        done.add(i)
        ready = sorted(set(ready) | {j for j, n in enumerate(needs) if j not in done and n <= done})
    if len(order) < len(funcs):
        order = list(range(len(funcs)))
    return [(funcs[i], halves[i]) for i in order]


def _walk(roots, neighbours, enter) -> set:
    """Indices reachable from ``roots`` through indices for which ``enter`` is true."""
    seen, stack = set(roots), list(roots)
    while stack:
        for j in neighbours[stack.pop()]:
            if j not in seen and enter(j):
                seen.add(j)
                stack.append(j)
    return seen


def paint(funcs, lists: AmpLists) -> List[bool]:
    """True for each function of ``funcs`` (in the order of :func:`functions`) that should
    compute in float16, by TensorFlow's four passes; the functions that carry indices
    (:func:`~updater.amp.integers.integer_functions`) stay float32 and no pass crosses them."""
    index = {f: i for i, f in enumerate(funcs)}
    succ: List[set] = [set() for _ in funcs]
    pred: List[set] = [set() for _ in funcs]
    for j, f in enumerate(funcs):
        for v in f.inputs:
            if v.parent is not None:
                pred[j].add(index[v.parent])
                succ[index[v.parent]].add(j)
    both = [p | s for p, s in zip(pred, succ)]
    exact = integer_functions(funcs)
    cls = [None if e else lists.class_of(f.info.type_name) for f, e in zip(funcs, exact)]
    nodes = range(len(funcs))

    # 1. half list. 2. deny: forward from float functions through infer functions and the
    # clear functions that lead (through clear ones) to an infer or float function.
    allow = {i for i in nodes if cls[i] == "half"}
    feeds_risky = _walk(
        [i for i in nodes if cls[i] in ("float", "infer")], pred, lambda j: cls[j] == "clear"
    )
    deny = _walk([i for i in nodes if cls[i] == "float"], succ, lambda j: j in feeds_risky)
    # 3. infer and clear functions on a path from a half function to another one.
    after_half = _walk(
        allow, succ, lambda j: j not in deny and j not in allow and cls[j] in ("infer", "clear")
    )
    allow |= _walk(allow, pred, lambda j: j in after_half)
    # 4. clear functions connected to a half function through clear functions.
    allow |= _walk(allow, both, lambda j: cls[j] == "clear" and j not in deny)
    return [i in allow for i in nodes]


def rewrite(output, lists: AmpLists | None = None, context=None):
    """Rebuild the graph ending in ``output`` with each function in a half or float context.

    Functions are created again by type name and arguments, in order; leaves (parameters,
    inputs, BatchNormalization's running statistics) are the same Variable objects, so the
    solver's parameters get the gradients and the statistics move in the new graph's forward.
    A stop-gradient (``v.get_unlinked_variable(need_grad=False)``) stays one, unlinked from the
    rebuilt ``v`` when ``v`` is rebuilt too; outputs keep ``persistent`` and ``recompute``.
    Functions of several outputs (Split, LSTM) keep all of them. Arguments are kept, inplace
    too: in nnabla 1.39 only Reshape honours it, and its shared array converts between float16
    and float32 on demand (tested: the same numbers as a copy). The original graph is left as
    it was. Function types in no list compute in float32 and are logged (warning); the
    functions that carry indices compute in float32 whatever the lists say.

    Args:
        output (nnabla.Variable or list of them): the outputs to rebuild (e.g. loss and
            prediction); the result has the same form.
        lists (AmpLists or None, default None): None means ``default_lists(context)``.
        context (nnabla.Context or None, default None): backend of the half and float contexts
            (:func:`amp_contexts`); None means the current default context. CUDA/cuDNN
            contexts work the same way but were not run here.

    Returns:
        nnabla.Variable (or list of them): the new output(s).
    """
    outputs = _as_list(output)
    lists = default_lists(context) if lists is None else check_lists(lists)
    half_ctx, float_ctx = amp_contexts(context)
    funcs = functions(outputs)
    unknown = sorted({f.info.type_name for f in funcs if lists.class_of(f.info.type_name) is None})
    if unknown:
        logger.warning("amp: function types in no list compute in float32: %s", unknown)
    new: Dict[nn.Variable, nn.Variable] = {}

    def rebuilt(v: nn.Variable) -> nn.Variable:
        if v.parent is not None:
            return new.get(v, v)
        # a leaf stays a leaf; an unlinked copy of a rebuilt variable (in nnabla 1.39 it hashes
        # and compares equal to its source) becomes an unlinked copy of the rebuilt one, so the
        # gradient still stops there and the data is the new graph's
        source = new.get(v)
        return v if source is None else source.get_unlinked_variable(need_grad=v.need_grad)

    for f, half in _sources_first(funcs, paint(funcs, lists)):
        make = getattr(NF, f.info.type_name)(half_ctx if half else float_ctx, **f.info.args)
        outs = make(*map(rebuilt, f.inputs), n_outputs=len(f.outputs), auto_forward=False)
        for old, o in zip(f.outputs, outs if isinstance(outs, tuple) else (outs,)):
            o.persistent, o.recompute = old.persistent, old.recompute
            new[old] = o
    result = [new.get(v, v) for v in outputs]
    return result[0] if isinstance(output, nn.Variable) else result


# ---------------------------------------------------------------- the table


def multiply_adds(f) -> int:
    """Multiply-adds of one forward of ``f`` for Affine, Convolution, DepthwiseConvolution,
    Deconvolution and BatchMatmul; 0 for other types."""
    kind = f.info.type_name
    x, y = f.inputs[0], f.outputs[0]
    if kind == "Affine":  # batch rows x weight size
        w = f.inputs[1]
        return x.size // w.shape[0] * w.size
    if kind in ("Convolution", "DepthwiseConvolution"):  # each output: one filter
        w = f.inputs[1]
        return y.size * (w.size // w.shape[0])
    if kind == "Deconvolution":  # each input: one filter
        w = f.inputs[1]
        return x.size * (w.size // w.shape[0])
    if kind == "BatchMatmul":
        inner = x.shape[-2] if f.info.args.get("transpose_a") else x.shape[-1]
        return y.size * inner
    return 0


def _computes_in(f) -> str:
    return str(f.context.backend[0]).partition(":")[2] or "?"


def half_share(output) -> float:
    """Share of the multiply-adds (of :func:`multiply_adds`) in functions with a half context;
    0.0 when there are none."""
    funcs = functions(output)
    total = sum(multiply_adds(f) for f in funcs)
    half = sum(multiply_adds(f) for f in funcs if _computes_in(f) == "half")
    return half / total if total else 0.0


def precision_table(output) -> str:
    """A markdown table of the functions of the graph ending in ``output``, in order: type
    name, the type of its context ("half"/"float"), multiply-adds; then the share of
    multiply-adds in half. Works on any graph, rewritten or not.

    The context type is what nnabla was asked for: where it has no half kernel (on the CPU
    Softmax, LogSoftmax, SoftmaxCrossEntropy) a half context computes in float32.
    """
    funcs = functions(output)
    lines = ["| # | function | computes in | multiply-adds |", "|---:|---|---|---:|"]
    for i, f in enumerate(funcs, 1):
        macs = multiply_adds(f)
        lines.append(f"| {i} | {f.info.type_name} | {_computes_in(f)} | {macs or '-'} |")
    total = sum(multiply_adds(f) for f in funcs)
    lines.append("")
    lines.append(f"{half_share(output):.1%} of {total} multiply-adds run in half.")
    return "\n".join(lines)
