"""What each nnabla function does with each of its inputs: the one table the updater's data and
state guards read (the bad-input rule, the forward-state copies and checks, the outside-forward
watch). :mod:`updater.driver.value_ranges` reads it for the values each input may hold.

Each input of a function has one role:

- :data:`VALUE`: a number read at the function's precision (a half-precision function reads
  |value| >= 65520 as inf);
- :data:`INDEX`: an integer index or label (never compared with float16's range; the values a
  function with a table accepts, ignores and reads out of bounds are in :data:`INDEXES`);
- :data:`FORWARD_STATE`: state the forward pass writes (running statistics, ...);
- :data:`BACKWARD_STATE`: state the backward pass writes (VATNoise's ``w``).

A function that draws random numbers (:func:`draws_random`) keeps its generator inside itself.

The input names and their order, the integer inputs (``template: TI``) and the random functions
(a ``seed`` argument) come from the installed nnabla's function registry
(``nnabla/utils/converter/functions.pkl``, built from its ``functions.yaml``). Written by hand:
which inputs a function writes and when (:data:`STATE`, from an audit of nnabla's C++ sources),
the index inputs the registry does not mark (:data:`INDEX_NAMES`), what a function does with
an index's values (:data:`INDEXES`), the functions that hand an array on without converting it
(:data:`HANDS_ON`), and the names of the functions reviewed (:data:`REVIEWED`, the registries
of nnabla 1.33 to 1.39), which a test compares with the installed registry.
"""

from __future__ import annotations

import functools
import os
import pickle
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, NamedTuple, Tuple

import nnabla as nn

VALUE = "value"
INDEX = "index"
FORWARD_STATE = "forward state"
BACKWARD_STATE = "backward state"
STATE_ROLES = (FORWARD_STATE, BACKWARD_STATE)


@functools.lru_cache(maxsize=None)
def registry() -> Dict[str, dict]:
    """nnabla's function registry: name -> its entry (``inputs``: name -> options, in order;
    ``arguments``: name -> type and default)."""
    path = os.path.join(os.path.dirname(nn.__file__), "utils", "converter", "functions.pkl")
    with open(path, "rb") as f:
        categories = pickle.load(f)["nnabla_func_info"]
    return {name: entry for category in categories.values() for name, entry in category.items()}


class Writes(NamedTuple):
    """The inputs a function writes.

    Attributes:
        written (tuple of str): their names (the registry's).
        role (str): :data:`FORWARD_STATE` or :data:`BACKWARD_STATE`.
        when (tuple of (str, value, default)): arguments that must have ``value`` for it to
            write them (``default`` for a function that lacks the argument).
        layout (callable or None): ``layout(args, count)``: the names of the inputs present
            among ``count`` inputs, where optional inputs are not only trailing ones.
    """

    written: Tuple[str, ...]
    role: str = FORWARD_STATE
    when: Tuple[Tuple[str, object, object], ...] = ()
    layout: Callable[[dict, int], List[str]] | None = None


def _batch_normalization_inputs(args, count):
    """nnabla leaves ``beta``/``gamma`` out with ``no_bias``/``no_scale``."""
    drop = {"beta"} if args.get("no_bias") else set()
    drop |= {"gamma"} if args.get("no_scale") else set()
    return [n for n in ("x", "beta", "gamma", "mean", "variance") if n not in drop][:count]


def _fused_convolution_inputs(args, count):
    """nnabla's ``FusedConvolution`` tells its inputs by their count (``bias`` never with the
    normalization): 6 or 7 carry beta, gamma, mean, variance (then z)."""
    if count >= 6:
        return ["x", "weight", "beta", "gamma", "mean", "variance", "z"][:count]
    return ["x", "weight", "bias", "z"][:count]


_TRAINING = (("batch_stat", True, True),)
_STATISTICS = ("mean", "variance")
_INQ = Writes(("weight", "indicator_fixedweights"))

STATE: Dict[str, Writes] = {
    "BatchNormalization": Writes(_STATISTICS, when=_TRAINING, layout=_batch_normalization_inputs),
    "SyncBatchNormalization": Writes(_STATISTICS, when=_TRAINING),
    "FusedBatchNormalization": Writes(_STATISTICS, when=_TRAINING),
    "FusedConvolution": Writes(_STATISTICS, when=_TRAINING, layout=_fused_convolution_inputs),
    "MeanSubtraction": Writes(("rmean", "t"), when=(("update_running_mean", True, True),)),
    "SpectralNorm": Writes(("u",), when=(("test", False, False),)),
    "MinMaxQuantize": Writes(("qr_min", "qr_max"), when=(("x_min_max", True, False),)),
    "Assign": Writes(("dst",)),
    "ScatterNd": Writes(("out",)),
    "BoolScatter": Writes(("output",)),
    "INQAffine": _INQ,
    "INQConvolution": _INQ,
    "VATNoise": Writes(("w",), BACKWARD_STATE),
}
"""The functions whose step writes some of their inputs, from an audit of nnabla's C++ sources
(``src/nbla/function/generic``, v1.39): every ``cast_data_and_get_pointer``, ``data()->cast``
or ``set_array`` on an input, and every inner function run with an input as its output.

- BatchNormalization, SyncBatchNormalization, FusedBatchNormalization and FusedConvolution
  (convolution, BatchNormalization, add, activation): ``mean``, ``variance`` when
  ``batch_stat``. With two or more ``axes`` nnabla's wrapper feeds transposed copies, which no
  step keeps (they are not leaves).
- MeanSubtraction: ``rmean`` and its count ``t`` when ``update_running_mean``.
- SpectralNorm: ``u`` unless ``test``.
- MinMaxQuantize: ``qr_min``, ``qr_max`` when ``x_min_max`` (their moving average with ``ema``,
  else the batch's min and max). Its forward also nudges ``qr_max`` up to ``qr_min + eps`` in
  every mode, which depends on ``qr_min`` alone and is redone each step: not state.
- Assign: ``dst``. ScatterNd: ``out`` and BoolScatter: ``output``, when given.
- INQAffine, INQConvolution: ``weight`` (fixed weights written back) and
  ``indicator_fixedweights``; their iteration counter lives inside the function.
- VATNoise: ``w``, written by its backward pass (the noise direction of the next step).

Not state: BinaryConnect/BinaryWeight's binary weight and alpha (written in every forward from
the float weight alone); the ``inplace`` options (ignored: the output is never the input's
memory); Reshape, Unlink (share memory, write nothing); RNN/LSTM/GRU's ``training`` (dropout
only). A user's own function (a ``PythonFunction``) is not in the registry: give what it writes
as ``forward_state=[...]``.
"""

INDEX_NAMES = ("indices", "lengths", "batch_sizes")
"""Inputs of these names (any case) are indices, besides the registry's integer inputs."""

IGNORED_FROM = -(2**31)
"""The lowest label a cross-entropy that ignores negative labels ignores: nnabla reads labels as
int32 (``Tl`` is ``int``), so an int64 label below it wraps (-2**31 - 1 becomes 2**31 - 1, read
out of bounds: measured, a segmentation fault)."""


@dataclass(frozen=True)
class Indexes:
    """How a function reads one of its index inputs (values read as int32, truncated toward 0:
    a float value in ``(-1, n)`` is an index in ``[0, n)``).

    Attributes:
        index (str): the index input (the registry's name).
        table (str): the input it indexes, or the argument of sizes (OneHot's ``shape``,
            ScatterNd's ``shape``).
        axis (int, str or None, default None): the table's axis, a number or the argument that
            holds it (the last axis without one; a bool argument: axis 1 if true, else 0);
            None with ``along``.
        ignores (bool, default False): a negative index (down to :data:`IGNORED_FROM`) is
            ignored: loss 0 and gradient 0 for its row; else it is read out of bounds.
        along (int or None, default None): the index's entries along this axis of the index
            address the table's leading axes one each (entry ``j`` bounded by the table's
            size ``n_j`` along its axis ``j``); None: every value indexes ``axis``.
        wraps (bool, default False): an index in ``[-n, 0)`` counts from the end.
        counts (bool, default False): a count of entries (a length), in ``[0, n]``.
    """

    index: str
    table: str
    axis: int | str | None = None
    ignores: bool = False
    along: int | None = None
    wraps: bool = False
    counts: bool = False


INDEXES: Dict[str, Indexes] = {
    "Embed": Indexes("x0", "w", 0),
    "OneHot": Indexes("x", "shape", along=-1, wraps=True),
    "Gather": Indexes("Indices", "x", "axis"),
    "GatherNd": Indexes("indices", "x", along=0, wraps=True),
    "ScatterNd": Indexes("indices", "shape", along=0, wraps=True),
    "ScatterAdd": Indexes("indices", "x0", "axis"),
    "PackPaddedSequence": Indexes("lengths", "padded_sequence", "batch_first", counts=True),
    "SoftmaxCrossEntropy": Indexes("target", "x", "axis", ignores=True),
    "CategoricalCrossEntropy": Indexes("target", "x", "axis", ignores=True),
    "TopNError": Indexes("target", "x", "axis"),
    "ConfusionMatrix": Indexes("target", "x", "axis"),
}
"""The values each function with an index into a table accepts, ignores and reads out of bounds
(``src/nbla/function/generic``, and nnabla-ext-cuda's kernels):

- SoftmaxCrossEntropy, CategoricalCrossEntropy: ``if (label < 0)``: loss 0, no gradient
  (CategoricalCrossEntropy's CPU source, SoftmaxCrossEntropy's CUDA kernels; the older CPU
  SoftmaxCrossEntropy sources read lack the test, so a test measures both on the installed
  nnabla, at -1, -7, -100, -1e6, -2**31 + 5 and -2**31); a label >= n reads another row's
  value (or past the array for the last row).
- Embed (``w + x[i] * stride``), TopNError (``p[k + label * size2]``), ConfusionMatrix (writes
  ``y[label * size1 + index]``): no test; -1 and n read or write out of bounds.
- OneHot: entry ``j`` of the index's last axis in ``[-shape[j], shape[j])``, a negative one
  counting from the end; outside it the row's one is silently not written (all zeros). Measured
  on nnabla 1.39 (a test repeats it): the sources read (``y[i * size + addr]``, unchecked) are
  older.
- Gather, GatherNd, ScatterNd, ScatterAdd: the CPU kernels raise (``NBLA_CHECK``) for an index
  they refuse, before any step is judged; nnabla-ext-cuda's Gather and GatherNd kernels do not
  check (Gather reads out of bounds; GatherNd skips only a flat offset past the array; the
  others' CUDA kernels not read): the bounds below are what the CPU kernels accept (measured
  in a test). GatherNd (``x``) and ScatterNd (its output ``shape``):
  row ``m`` of the index (axis 0) indexes the table's axis ``m``, in ``[-n_m, n_m)``, a
  negative index counting from the end. ScatterAdd: ``[0, n)`` along ``axis`` (it compares the
  value before truncating it: -0.5 is refused on the CPU).
- PackPaddedSequence: each length in ``[0, T]`` (``T`` the padded sequence's time axis, 1 with
  ``batch_first``); a longer or negative length packs wrong rows silently (measured).

BinaryError compares both inputs with 0.5: values, not indices. The other index inputs
(:data:`INDEX_NAMES`, the registry's integer inputs) have no table here: any finite value."""

HANDS_ON: Dict[str, Tuple[Tuple[str, object, object], ...]] = {
    "Reshape": (("inplace", True, True),),
    "Unlink": (),
    "Identity": (),
}
"""The functions whose output is their input's array as it is, in its own dtype, whatever their
context (``(argument, value, default)`` that must hold, as :attr:`Writes.when`): Reshape with
``inplace`` and Unlink share it (``set_array`` in their setup, an empty forward); Identity
copies it in the dtype of its head array. So a float32 value passed through them to a float32
function is never converted, in ``cpu:half`` too. The other functions of a half context read
their values as float16 (a test measures both against a plain forward, with Reshape with
``inplace=False``, Broadcast, Transpose, Slice, Concatenate, Pad, and ReLU, MulScalar and Add2
with ``inplace=True``: each converts)."""


def hands_on(func) -> bool:
    """Whether ``func`` (a function of an nnabla graph) hands its input's array on to its output
    unconverted (:data:`HANDS_ON`)."""
    when = HANDS_ON.get(func.info.type_name)
    args = func.info.args
    return when is not None and all(args.get(n, default) == v for n, v, default in when)


REVIEWED = frozenset(
    """
    Affine RNN LSTM GRU Convolution FusedConvolution DepthwiseConvolution Deconvolution
    DepthwiseDeconvolution DeformableConvolution AdaptiveSeparableConvolution MaxPooling
    AveragePooling GlobalAveragePooling SumPooling Unpooling Embed RoiAlign Sigmoid Swish Tanh
    ReLU LeakyReLU Softmax LogSoftmax ELU SELU CReLU CELU PReLU GELU Mish ReLU6 HardSigmoid
    HardTanh LogSigmoid SoftPlus SoftSign TanhShrink Sinc FusedBatchNormalization
    BatchNormalization GroupNormalization InstanceNormalization LayerNormalization
    NormNormalization SyncBatchNormalization TensorNormalization WeightNormalization
    WeightStandardization SpectralNorm MeanSubtraction ClipGradByValue ClipGradByNorm Sum CumSum
    Mean Max Min Norm Prod CumProd ReduceSum ReduceMean Add2 AddN BcAdd2 Sub2 Mul2 MulN Div2 Pow2
    AddScalar MulScalar PowScalar RSubScalar RDivScalar RPowScalar Sign Minimum2 Maximum2
    MinimumScalar MaximumScalar LogicalAnd LogicalOr LogicalXor Equal NotEqual GreaterEqual
    Greater LessEqual Less SearchSorted LogicalAndScalar LogicalOrScalar LogicalXorScalar
    EqualScalar NotEqualScalar GreaterEqualScalar GreaterScalar LessEqualScalar LessScalar
    LogicalNot IsNaN IsInf ResetNaN ResetInf Where Constant Arange Linspace Abs Exp Log Identity
    BatchMatmul Round Ceil Floor Sin Cos Tan Sinh Cosh ASin ACos ATan ATan2 ASinh ACosh ATanh Erf
    Concatenate Split Stack Slice Pad Transpose Broadcast BroadcastTo Tile OneHot Flip Shift Sort
    Reshape Shape MatrixDiag MatrixDiagPart Trilu Meshgrid BatchDet BatchInv BatchLogdet
    BatchCholesky Assign Gather GatherNd BoolGather ScatterNd ScatterAdd BoolScatter BoolFill
    PackPaddedSequence PadPackedSequence NonZero Interpolate ONNXResize FFT IFFT STFT ISTFT
    Dropout TopKData TopKGrad Rand Randint Randn RandBinomial RandBeta RandGamma RandomChoice
    RandomCrop RandomFlip RandomShift RandomErase ImageAugmentation SigmoidCrossEntropy
    BinaryCrossEntropy SoftmaxCrossEntropy CategoricalCrossEntropy SquaredError AbsoluteError
    HuberLoss EpsilonInsensitiveLoss KLMultinomial AffineGrid WarpByGrid WarpByFlow BinarySigmoid
    BinaryTanh BinaryConnectAffine BinaryConnectConvolution BinaryWeightAffine
    BinaryWeightConvolution INQAffine INQConvolution FixedPointQuantize MinMaxQuantize
    Pow2Quantize Prune QuantizeLinear DequantizeLinear TopNError BinaryError ConfusionMatrix
    VATNoise Unlink Sink NmsDetection2d ONNXNonMaxSuppression MaxPoolingBackward
    PatchCorrelation Unique EyeLike Mod2 BitShift Einsum
    """.split()
)
"""Every function of the registries of nnabla 1.33 to 1.39, reviewed for the inputs it writes
(:data:`STATE`) and the indices it reads (:data:`INDEX_NAMES`, :data:`INDEXES`); the other
inputs are values. A function of a newer nnabla is read with the roles its registry shows."""


def unregistered_functions(loss) -> List[str]:
    """``"<type> '<name>'"`` of the functions of the graph of ``loss`` that nnabla's registry
    lacks (a user's ``PythonFunction``), each once."""
    found: Dict[str, None] = {}

    def visit(func):
        if func.info.type_name not in registry():
            found.setdefault(f"{func.info.type_name} '{func.name}'")

    loss.visit(visit)
    return list(found)


def draws_random(type_name: str) -> bool:
    """Whether nnabla's function ``type_name`` draws random numbers (a ``seed`` argument)."""
    entry = registry().get(type_name)
    return entry is not None and "seed" in entry.get("arguments", {})


def input_names(type_name: str, args: dict, count: int) -> List[str]:
    """The registry names of ``count`` inputs of function ``type_name`` with ``args``."""
    writes = STATE.get(type_name)
    if writes is not None and writes.layout is not None:
        return writes.layout(args, count)
    names = list(registry()[type_name]["inputs"])
    if len(names) == 1 and count > 1:  # a variadic input
        names = names * count
    return names[:count]


def _writes(writes: Writes, args: dict) -> bool:
    return all(args.get(name, default) == value for name, value, default in writes.when)


def input_roles(func) -> List[str]:
    """The role of each input of ``func`` (a function of an nnabla graph), in order; every
    input of a function the registry lacks (a ``PythonFunction``) is a value."""
    name, args, count = func.info.type_name, func.info.args, len(func.inputs)
    entry = registry().get(name)
    if entry is None:
        return [VALUE] * count
    names = input_names(name, args, count)
    writes = STATE.get(name)
    if writes is not None and _writes(writes, args):
        written, role = writes.written, writes.role
    else:
        written, role = (), VALUE  # role: never read (nothing written)
    roles = []
    for n in names:
        if n in written:
            roles.append(role)
        elif entry["inputs"][n].get("template") == "TI" or n.lower() in INDEX_NAMES:
            roles.append(INDEX)
        else:
            roles.append(VALUE)
    return roles + [VALUE] * (count - len(roles))


def _leaf_state(loss, roles) -> List[Tuple[Any, nn.Variable]]:
    """``(function, input)`` for every leaf input of the graph of ``loss`` with one of ``roles``."""
    found = []

    def visit(func):
        for v, role in zip(func.inputs, input_roles(func)):
            if role in roles and v.parent is None:
                found.append((func, v))

    loss.visit(visit)
    return found


def state_entries(loss, roles=STATE_ROLES) -> Dict[str, nn.Variable]:
    """The leaves of the graph of ``loss`` that its step writes (with one of ``roles``), each
    once, by names that do not depend on the process (Python ids, nnabla's function names):
    ``"<type>[<k>]/<input>"``, the input (the registry's name) of the ``k``-th function of that
    type in the graph's forward order that writes it first, e.g.
    ``"BatchNormalization[1]/mean"``."""
    found: Dict[str, nn.Variable] = {}
    seen: Dict[int, None] = {}
    count: Dict[str, int] = {}

    def visit(func):
        kind = func.info.type_name
        k = count[kind] = count.get(kind, -1) + 1
        names = None
        for i, (v, role) in enumerate(zip(func.inputs, input_roles(func))):
            if role in roles and v.parent is None and hash(v) not in seen:
                seen[hash(v)] = None
                names = names or input_names(kind, func.info.args, len(func.inputs))
                found[f"{kind}[{k}]/{names[i]}"] = v

    loss.visit(visit)
    return found


def state_inputs(loss, roles=STATE_ROLES) -> List[nn.Variable]:
    """The leaves of the graph of ``loss`` that its step writes (with one of ``roles``),
    whether or not they are registered parameters; each once (:func:`state_entries`)."""
    return list(state_entries(loss, roles).values())


def state_writers(loss) -> List[Any]:
    """The functions of the graph of ``loss`` whose forward pass writes state there."""
    found: Dict[int, Any] = {}
    for func, _ in _leaf_state(loss, (FORWARD_STATE,)):
        found.setdefault(hash(func.outputs[0]), func)  # a function's Python object is remade
    return list(found.values())


def writer_names(loss, variables: List[nn.Variable]) -> List[str]:
    """For each of ``variables``, the function of the graph of ``loss`` that writes it
    (``"<type> '<name>'"``), or ``"forward_state"`` for one no function of nnabla writes."""
    found: Dict[int, str] = {}
    for func, v in _leaf_state(loss, STATE_ROLES):
        found.setdefault(hash(v), f"{func.info.type_name} '{func.name}'")
    return [found.get(hash(v), "forward_state") for v in variables]
