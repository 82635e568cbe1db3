"""The inputs of an nnabla graph that its training step writes: state, not data.

A function that writes one of its inputs keeps state in it (running statistics, a power
iteration's vector, a quantization range). The updater copies such state before a step and puts
it back after a skipped step, before a retry and after probes, never checks it as bad data, and
reports it when it becomes inf/NaN (:mod:`updater.driver.forward_state`).
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Tuple

import nnabla as nn


class Writes(NamedTuple):
    """What one nnabla function writes among its inputs.

    Attributes:
        inputs (tuple of str): its input names, in nnabla's order (``functions.yaml``).
        written (tuple of str): the names of the inputs it writes.
        when (tuple of (str, value, default)): arguments that must have ``value`` for it to
            write them (``default``: the argument's default, for a function that lacks it).
        dropped (tuple of (str, str)): ``(input, argument)``: the input is left out of the
            function's inputs when the argument is True (nnabla's ``no_bias``/``no_scale``).
    """

    inputs: Tuple[str, ...]
    written: Tuple[str, ...]
    when: Tuple[Tuple[str, object, object], ...] = ()
    dropped: Tuple[Tuple[str, str], ...] = ()

    def indices(self, args: dict, count: int) -> List[int]:
        """Positions of the written inputs among ``count`` inputs of a function with ``args``
        (none when an argument of ``when`` differs; optional trailing inputs may be absent)."""
        if any(args.get(name, default) != value for name, value, default in self.when):
            return []
        drop = {name for name, arg in self.dropped if args.get(arg, False)}
        present = [name for name in self.inputs if name not in drop][:count]
        return [present.index(name) for name in self.written if name in present]


_TRAINING = (("batch_stat", True, True),)
_BN = ("x", "beta", "gamma", "mean", "variance")
_BN_OPTIONS = (("beta", "no_bias"), ("gamma", "no_scale"))
_STATISTICS = ("mean", "variance")
_RANGE_FROM_X = (("x_min_max", True, False),)
_FIXED = ("weight", "indicator_fixedweights")
_INQ = Writes(("x",) + _FIXED + ("bias",), _FIXED)

WRITTEN_INPUTS: Dict[str, Writes] = {
    "BatchNormalization": Writes(_BN, _STATISTICS, _TRAINING, _BN_OPTIONS),
    "SyncBatchNormalization": Writes(_BN, _STATISTICS, _TRAINING, _BN_OPTIONS),
    "FusedBatchNormalization": Writes(_BN + ("z",), _STATISTICS, _TRAINING),
    "MeanSubtraction": Writes(
        ("x", "rmean", "t"), ("rmean", "t"), (("update_running_mean", True, True),)
    ),
    "SpectralNorm": Writes(("w", "u"), ("u",), (("test", False, False),)),
    "MinMaxQuantize": Writes(
        ("x", "qr_min", "qr_max", "ql_min", "ql_max"), ("qr_min", "qr_max"), _RANGE_FROM_X
    ),
    "Assign": Writes(("dst", "src"), ("dst",)),
    "ScatterNd": Writes(("data", "indices", "out"), ("out",)),
    "BoolScatter": Writes(("input", "mask", "output"), ("output",)),
    "INQAffine": _INQ,
    "INQConvolution": _INQ,
    "VATNoise": Writes(("x", "w"), ("w",)),
}
"""nnabla functions whose step writes some of their inputs, from an audit of nnabla's
``functions.yaml`` (228 functions) and its C++ sources (``src/nbla/function/generic``, v1.39,
the version installed): every ``cast_data_and_get_pointer``, ``data()->cast`` or ``set_array``
on an input, and every inner function run with an input as its output.

- BatchNormalization, SyncBatchNormalization: ``mean``, ``variance`` when ``batch_stat``; with
  ``no_bias``/``no_scale`` nnabla leaves ``beta``/``gamma`` out of the inputs, so the running
  statistics are always the last two. FusedBatchNormalization: the same (``z`` after them; its
  Python wrapper passes constant beta/gamma). With two or more ``axes`` nnabla's wrapper feeds
  transposed copies, which no step keeps (they are not leaves).
- MeanSubtraction: ``rmean`` and its count ``t`` when ``update_running_mean``.
- SpectralNorm: ``u`` unless ``test``.
- MinMaxQuantize: ``qr_min``, ``qr_max`` when ``x_min_max`` (their moving average with ``ema``,
  else the batch's min and max). Its forward also nudges ``qr_max`` up to ``qr_min + eps`` in
  every mode, which depends on ``qr_min`` alone and is redone each step: not state.
- Assign: ``dst``. ScatterNd: ``out`` and BoolScatter: ``output``, when given (the result is
  written into them).
- INQAffine, INQConvolution: ``weight`` (fixed weights written back) and
  ``indicator_fixedweights`` (at the ``inq_iterations``); their iteration counter lives inside
  the function, where nothing can put it back.
- VATNoise: ``w``, written by its backward pass (the noise direction of the next step).

Not state: BinaryConnectAffine/Convolution's binary weight and BinaryWeightAffine/Convolution's
binary weight and alpha (written in every forward from the float weight alone, so redone the
same after a skipped step); the obsolete ``inplace`` options of the arithmetic functions
(ignored: the output is never the input's memory); Reshape, Unlink (share memory, write
nothing). Random functions keep their generator inside the function (see the README). A user's
own function (a ``PythonFunction``) is not in this table: give what it writes as
``forward_state=[...]``.
"""


def forward_written(loss) -> List[nn.Variable]:
    """The leaves of the graph of ``loss`` that its step writes (:data:`WRITTEN_INPUTS`,
    resolved from each function's arguments), whether or not they are registered parameters;
    each once."""
    found: Dict[int, nn.Variable] = {}

    def visit(func):
        entry = WRITTEN_INPUTS.get(func.info.type_name)
        if entry is not None:
            for i in entry.indices(func.info.args, len(func.inputs)):
                if func.inputs[i].parent is None:
                    found.setdefault(hash(func.inputs[i]), func.inputs[i])

    loss.visit(visit)
    return list(found.values())
