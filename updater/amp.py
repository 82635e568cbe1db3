"""Automatic mixed precision for nnabla graphs: rebuild a float graph so that each function
computes in float16 or float32, chosen by lists of function type names.

nnabla has no cast function: arrays convert between float16 and float32 when a function reads
them in its context's type. So the rewrite only chooses a context per function. The four classes
and the painting rules follow TensorFlow's ``auto_mixed_precision`` graph rewrite:

- ``half``: always float16 (matrix products, convolutions: the multiply-adds);
- ``infer``: float16 only between two half functions (on a path half -> infer/clear -> half)
  and not downstream of a ``float`` function through infer/clear functions;
- ``float``: always float32 (exp, log, losses, large reductions, statistics);
- ``clear``: no numerical effect (reshape, ReLU, max pooling): float16 when connected to a half
  function through clear functions only, and not tainted by a ``float`` function.

Function types in no list compute in float32, and :func:`rewrite` logs them. See
:func:`describe_lists` for the default lists and the reason for each entry.

Contexts come from the current default context (or ``context=``): ``cpu`` gives
``cpu:half``/``cpu:float``; ``cudnn`` and ``cuda`` give the backend lists of nnabla-ext-cuda's
``type_config="half"``/``"float"`` contexts. The CUDA path builds the same graphs but was not
run here (no GPU): only the Context objects were checked. nnabla's CPU half kernels accumulate
sums in float16 (also in Affine and Convolution), so on the CPU the rewrite is a numerical
testbed, not a speed-up.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Tuple

import nnabla as nn
import nnabla.function as NF

logger = logging.getLogger(__name__)

CLASSES = ("half", "infer", "float", "clear")

_BN = ("BatchNormalization", "FusedBatchNormalization", "SyncBatchNormalization")

# (class, function type names, reason): the default lists. BatchNormalization is added by
# default_lists() because its class depends on the backend.
GROUPS: Tuple[Tuple[str, str, str], ...] = (
    (
        "half",
        "Affine BatchMatmul Einsum",
        "matrix products: most of the multiply-adds; cuBLAS accumulates float16 products in "
        "float32",
    ),
    (
        "half",
        "Convolution Deconvolution DepthwiseConvolution DepthwiseDeconvolution "
        "DeformableConvolution",
        "convolutions: most of the multiply-adds; cuDNN accumulates them in float32",
    ),
    ("half", "RNN LSTM GRU", "recurrent layers: matrix products inside one function"),
    (
        "infer",
        "Add2 BcAdd2 AddN Sub2 Mul2 MulN Div2 AddScalar MulScalar RSubScalar RDivScalar",
        "elementwise arithmetic: one rounding per value, no accumulation",
    ),
    (
        "infer",
        "Sigmoid Tanh LeakyReLU ELU SELU CELU PReLU GELU Swish Mish HardSigmoid SoftSign "
        "TanhShrink Erf Sin Cos",
        "activations with bounded output or output no larger than the input",
    ),
    (
        "infer",
        "AveragePooling SumPooling Interpolate WarpByGrid AffineGrid",
        "pooling and resampling over a few neighbouring values",
    ),
    (
        "float",
        "Exp SoftPlus LogSigmoid Sinh Cosh",
        "exp leaves float16's range (max 65504) for inputs above 11.1",
    ),
    (
        "float",
        "Log Pow2 PowScalar RPowScalar Tan ASin ACos",
        "logs, powers and poles: results outside float16's range or precision",
    ),
    ("float", "Softmax LogSoftmax", "exp and a sum over the classes"),
    (
        "float",
        "SoftmaxCrossEntropy SigmoidCrossEntropy CategoricalCrossEntropy BinaryCrossEntropy "
        "AbsoluteError SquaredError HuberLoss EpsilonInsensitiveLoss KLMultinomial",
        "losses: logs, exps or squared errors, summed next",
    ),
    (
        "float",
        "Sum Mean ReduceSum ReduceMean Prod CumSum CumProd GlobalAveragePooling",
        "large reductions: a float16 sum overflows above 65504, and nnabla's CPU half kernels "
        "also accumulate in float16 (4096 values of 2.3 sum to 8190 there)",
    ),
    (
        "float",
        "Norm NormNormalization ClipGradByNorm LayerNormalization GroupNormalization "
        "InstanceNormalization TensorNormalization WeightStandardization WeightNormalization "
        "SpectralNorm MeanSubtraction",
        "statistics and norms over many values (sums of squares)",
    ),
    ("float", "TopNError BinaryError", "metrics: counts, off the gradient path"),
    (
        "clear",
        "ReLU ReLU6 HardTanh ClipGradByValue Maximum2 Minimum2 MaximumScalar MinimumScalar Abs "
        "Sign Round Ceil Floor ResetNaN ResetInf MaxPooling Max Min TopKData Sort Where",
        "selects, clips or rounds: each output is an input value, a constant or exact",
    ),
    (
        "clear",
        "Reshape Transpose Concatenate Split Stack Slice Pad Tile Flip Shift Broadcast "
        "BroadcastTo Identity Unpooling MatrixDiag MatrixDiagPart Gather GatherNd Embed OneHot "
        "RandomFlip RandomCrop RandomShift",
        "moves, copies or looks up values",
    ),
    ("clear", "Dropout", "zeroes values and scales the rest by 1/(1-p)"),
    (
        "clear",
        "Greater GreaterEqual Less LessEqual Equal NotEqual GreaterScalar GreaterEqualScalar "
        "LessScalar LessEqualScalar EqualScalar NotEqualScalar IsNaN IsInf LogicalAnd LogicalOr "
        "LogicalXor LogicalNot LogicalAndScalar LogicalOrScalar LogicalXorScalar",
        "comparisons and logic: 0/1 outputs",
    ),
)

BN_REASONS = {
    "infer": "cuDNN normalizes float16 inputs with float32 statistics, scale and bias",
    "float": "statistics in float16: nnabla's CPU half kernel sums x and x^2 in float16 (inputs "
    "of mean 30 give variance inf and output 0), CUDA's stores running statistics as float16",
}


@functools.lru_cache(maxsize=None)
def function_names() -> FrozenSet[str]:
    """nnabla's function type names (``f.info.type_name``), from its function list."""
    from nnabla.utils.converter.utils import get_function_info

    return frozenset(get_function_info())


def _names(arg: str, value) -> FrozenSet[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise TypeError(f"{arg} must be a collection of function type names, got {value!r}")
    names = frozenset(value)
    unknown = sorted(n for n in names if not isinstance(n, str) or n not in function_names())
    if unknown:
        raise ValueError(
            f"{arg} has names that are not nnabla function types: {unknown}; use type names "
            "as f.info.type_name gives them, e.g. 'Affine', 'SoftmaxCrossEntropy'"
        )
    return names


@dataclass(frozen=True)
class AmpLists:
    """The four lists of function type names (see the module docstring for the rules).

    Args:
        half (collection of str, default empty): always float16.
        infer (collection of str, default empty): float16 between half functions, unless
            downstream of a ``float`` function.
        float (collection of str, default empty): always float32.
        clear (collection of str, default empty): follow half neighbours.

    Raises:
        TypeError: a list is not a collection of str.
        ValueError: a name is not an nnabla function type, or is in two lists.

    >>> AmpLists(half=["Affine"]).class_of("Affine")
    'half'
    """

    half: FrozenSet[str] = frozenset()
    infer: FrozenSet[str] = frozenset()
    float: FrozenSet[str] = frozenset()
    clear: FrozenSet[str] = frozenset()

    def __post_init__(self):
        seen: Dict[str, str] = {}
        for cls in CLASSES:
            names = _names(cls, getattr(self, cls))
            object.__setattr__(self, cls, names)
            for name in names:
                if name in seen:
                    raise ValueError(f"{name!r} is in two lists: {seen[name]!r} and {cls!r}")
                seen[name] = cls

    def class_of(self, name: str) -> str | None:
        """The list holding ``name``, or None."""
        return next((c for c in CLASSES if name in getattr(self, c)), None)

    def updated(self, *, half=(), infer=(), float=(), clear=(), remove=()) -> AmpLists:
        """A copy with the named functions moved into the given list (out of any other), and
        the ``remove`` names taken out of every list (they then compute in float32).

        Args:
            half, infer, float, clear, remove (collection of str, default empty): names.

        >>> lists = AmpLists(half=["Affine"], float=["Tanh"]).updated(infer=["Tanh"])
        >>> lists.class_of("Tanh"), lists.class_of("Affine")
        ('infer', 'half')
        """
        moves = {"half": half, "infer": infer, "float": float, "clear": clear, "remove": remove}
        moved: Dict[str, str] = {}
        for arg, value in moves.items():
            for name in _names(arg, value):
                if name in moved:
                    raise ValueError(f"{name!r} given twice: in {moved[name]!r} and {arg!r}")
                moved[name] = arg
        lists = {
            c: {n for n in getattr(self, c) if n not in moved}
            | {n for n, a in moved.items() if a == c}
            for c in CLASSES
        }
        return AmpLists(**lists)


def default_lists(context=None) -> AmpLists:
    """The default lists for the backend of ``context`` (None: the current default context).

    BatchNormalization (also Fused and Sync) is ``infer`` under cuDNN and ``float`` on the
    CPU and plain CUDA; every other entry is the same for all backends.

    Args:
        context (nnabla.Context or None, default None): decides the backend.
    """
    lists: Dict[str, set] = {c: set() for c in CLASSES}
    for cls, names, _ in GROUPS:
        lists[cls].update(names.split())
    lists[_bn_class(context)].update(_BN)
    return AmpLists(**lists)


def _bn_class(context) -> str:
    return "infer" if _extension(context) == "cudnn" else "float"


def describe_lists(lists: AmpLists | None = None, context=None) -> str:
    """A markdown table of the lists: class, function types, and why.

    Names whose class differs from the defaults show "set by the user"; names in no list
    are not shown (they compute in float32).

    Args:
        lists (AmpLists or None, default None): None describes ``default_lists(context)``.
        context (nnabla.Context or None, default None): backend of the defaults.
    """
    defaults = default_lists(context)
    lists = defaults if lists is None else _check_lists(lists)
    reasons = {n: r for _, names, r in GROUPS for n in names.split()}
    reasons.update(dict.fromkeys(_BN, BN_REASONS[_bn_class(context)]))
    lines = ["| class | function types | reason |", "|---|---|---|"]
    for cls in CLASSES:
        by_reason: Dict[str, List[str]] = {}
        for name in sorted(getattr(lists, cls)):
            same = defaults.class_of(name) == cls
            by_reason.setdefault(reasons[name] if same else "set by the user", []).append(name)
        for reason, names in by_reason.items():
            lines.append(f"| {cls} | {', '.join(names)} | {reason} |")
    return "\n".join(lines)


def _check_lists(lists) -> AmpLists:
    if not isinstance(lists, AmpLists):
        raise TypeError(f"lists must be an AmpLists or None, got {type(lists).__name__}")
    return lists


# ---------------------------------------------------------------- contexts

_BACKENDS = {  # extension: (half backends, float backends), as nnabla's context() functions
    "cpu": (["cpu:half", "cpu:float"], ["cpu:float"]),
    "cuda": (["cuda:half", "cuda:float", "cpu:float"], ["cuda:float", "cpu:float"]),
    "cudnn": (
        ["cudnn:half", "cudnn:float", "cuda:half", "cuda:float", "cpu:float"],
        ["cudnn:float", "cuda:float", "cpu:float"],
    ),
}


def _extension(context) -> str:
    ctx = nn.get_current_context() if context is None else context
    if not isinstance(ctx, nn.Context):
        raise TypeError(f"context must be an nnabla.Context or None, got {type(ctx).__name__}")
    ext = str(ctx.backend[0]).partition(":")[0] if ctx.backend else ""
    if ext not in _BACKENDS:
        raise ValueError(
            f"context must have a 'cpu', 'cuda' or 'cudnn' backend, got {list(ctx.backend)}"
        )
    return ext


def amp_contexts(context=None) -> Tuple[nn.Context, nn.Context]:
    """The half and float contexts of the backend of ``context``, built without running it.

    Args:
        context (nnabla.Context or None, default None): None means the current default context.

    Returns:
        (half, float) nnabla.Context pair, with the device id and array class of ``context``
        (CUDA's: device "0" and "CudaCachedArray" when it names none).

    >>> [c.backend for c in amp_contexts(nn.Context(["cpu:float"]))]
    [['cpu:half', 'cpu:float'], ['cpu:float']]
    """
    ext = _extension(context)
    ctx = nn.get_current_context() if context is None else context
    if ext == "cpu":
        from nnabla.ext_utils import get_extension_context

        array_class = ctx.array_class or get_extension_context("cpu").array_class
        device_id = ""
    else:
        array_class = ctx.array_class or "CudaCachedArray"
        device_id = ctx.device_id or "0"
    half, flt = _BACKENDS[ext]
    return nn.Context(half, array_class, device_id), nn.Context(flt, array_class, device_id)


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
    compute in float16, by TensorFlow's four passes."""
    index = {f: i for i, f in enumerate(funcs)}
    succ: List[set] = [set() for _ in funcs]
    pred: List[set] = [set() for _ in funcs]
    for j, f in enumerate(funcs):
        for v in f.inputs:
            if v.parent is not None:
                pred[j].add(index[v.parent])
                succ[index[v.parent]].add(j)
    both = [p | s for p, s in zip(pred, succ)]
    cls = [lists.class_of(f.info.type_name) for f in funcs]
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
    Functions of several outputs (Split, LSTM) keep all of them. Arguments are kept, inplace
    too: in nnabla 1.39 only Reshape honours it, and its shared array converts between float16
    and float32 on demand (tested: the same numbers as a copy). The original graph is left as
    it was. Function types in no list compute in float32 and are logged (warning).

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
    lists = default_lists(context) if lists is None else _check_lists(lists)
    half_ctx, float_ctx = amp_contexts(context)
    funcs = functions(outputs)
    unknown = sorted({f.info.type_name for f in funcs if lists.class_of(f.info.type_name) is None})
    if unknown:
        logger.warning("amp: function types in no list compute in float32: %s", unknown)
    new: Dict[nn.Variable, nn.Variable] = {}
    for f, half in zip(funcs, paint(funcs, lists)):
        make = getattr(NF, f.info.type_name)(half_ctx if half else float_ctx, **f.info.args)
        outs = make(
            *[new.get(v, v) for v in f.inputs], n_outputs=len(f.outputs), auto_forward=False
        )
        for old, o in zip(f.outputs, outs if isinstance(outs, tuple) else (outs,)):
            o.persistent = old.persistent
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


__all__ = [
    "AmpLists",
    "CLASSES",
    "amp_contexts",
    "default_lists",
    "describe_lists",
    "functions",
    "half_share",
    "multiply_adds",
    "paint",
    "precision_table",
    "rewrite",
]
