"""The AMP rewrite's lists of nnabla function type names, with the reason for each default
entry, and its half and float contexts per backend (:mod:`updater.amp` paints and rebuilds)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Tuple

import nnabla as nn

CLASSES = ("half", "infer", "float", "clear")

_BN = ("BatchNormalization", "FusedBatchNormalization", "SyncBatchNormalization")

LAYOUT = frozenset(
    "Reshape Transpose Concatenate Split Stack Slice Pad Tile Flip Shift Broadcast BroadcastTo "
    "Identity Unpooling MatrixDiag MatrixDiagPart Gather GatherNd RandomFlip RandomCrop "
    "RandomShift".split()
)
"""The layout functions: each output value is a value of their moved inputs (the inputs the
role table calls values; Gather's indices are not moved) or a constant (Pad, MatrixDiag,
Unpooling), so integer data stays integer through them (:mod:`updater.amp.integers`)."""

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
        " ".join(sorted(LAYOUT)),
        "moves or copies values; kept in float32 where it carries indices (integers beyond "
        "2048 are not all float16 numbers)",
    ),
    ("clear", "Embed OneHot", "looks up rows by an index, or writes 0/1"),
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
            c: frozenset(n for n in getattr(self, c) if n not in moved)
            | {n for n, a in moved.items() if a == c}
            for c in CLASSES
        }
        return AmpLists(**lists)


def default_lists(context=None) -> AmpLists:
    """The default lists for the backend of ``context`` (None: the current default context).

    BatchNormalization (also Fused and Sync) is ``infer`` under cuDNN and ``float`` on the
    CPU and plain CUDA; every other entry is the same for all backends.
    Entries the installed nnabla lacks are left out (``Einsum`` is new in nnabla 1.38).

    Args:
        context (nnabla.Context or None, default None): decides the backend.
    """
    lists: Dict[str, set] = {c: set() for c in CLASSES}
    for cls, names, _ in GROUPS:
        lists[cls].update(n for n in names.split() if n in function_names())
    lists[_bn_class(context)].update(_BN)
    return AmpLists(**{c: frozenset(names) for c, names in lists.items()})


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
    lists = defaults if lists is None else check_lists(lists)
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


def check_lists(lists) -> AmpLists:
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
