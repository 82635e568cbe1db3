"""The real nnabla models whose recorded traces and measured runs ship with the package: their
names, one line each, and where the files are (recorded by :mod:`sim.nnabla_studies.real_traces`).

The files are package data in ``sim/traces/data`` (:data:`SHIPPED_DIR`), found through the
imported package, so ``dls report`` and ``dls simulate --trace <model>`` work from any folder
once the wheel is installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

MODELS = ("digits_mlp", "digits_conv_bn", "sequence_lstm", "sequence_attention")
MODEL_NOTES = {
    "digits_mlp": "real: MLP 64-64-10 on sklearn's 8x8 digits, Momentum, cpu:half",
    "digits_conv_bn": "real: 2 conv + BatchNorm on sklearn's 8x8 digits, Momentum, cpu:half",
    "sequence_lstm": "real: LSTM counting ones in 0/1 sequences, Adam, cpu:half",
    "sequence_attention": "real: 2-block self-attention reversing token sequences, Adam, cpu:half",
}
"""One line per model, for tables."""

SHIPPED_DIR = Path(__file__).resolve().parent / "data"
"""The folder of the shipped traces (``<model>.npz``) and measured runs
(``<model>.<policy>.run.npz``): ``sim/traces/data`` in the installed package (in a checkout
or an editable install, the checkout's)."""
SHIPPED = "shipped"
"""The name that stands for :data:`SHIPPED_DIR` where a folder of real traces is asked for
(``dls report --real-traces``, ``ReportConfig.real_traces``)."""


def traces_dir(folder: Union[str, Path]) -> Path:
    """The folder of real traces that ``folder`` names: :data:`SHIPPED_DIR` for ``"shipped"``,
    else the path itself (relative to the current folder).

    >>> traces_dir("shipped") == SHIPPED_DIR, traces_dir("my/traces").parts
    (True, ('my', 'traces'))
    """
    return SHIPPED_DIR if str(folder) == SHIPPED else Path(folder)


RECORDINGS = (0, 1)
"""The batch orders of the recordings of each model (:func:`trace_path`): two samples of
training, pooled by the report's predictions (:class:`sim.replay.pool.TracePool`)."""
CHECK_ORDERS = (2,)
"""The batch orders of the real runs that check the predictions: none of them was recorded."""


def recording_stem(model: str, order: int = 0) -> str:
    """The file stem of ``model``'s recording (and its runs) in batch order ``order``.

    >>> recording_stem("digits_mlp"), recording_stem("digits_mlp", 1)
    ('digits_mlp', 'digits_mlp.order1')
    """
    return model if order == 0 else f"{model}.order{order}"


def trace_path(folder: Union[str, Path], model: str, order: int = 0) -> Path:
    """Where ``model``'s trace recorded in batch order ``order`` is kept in ``folder``."""
    return Path(folder) / f"{recording_stem(model, order)}.npz"


SHIPPED_RECORDINGS = tuple(recording_stem(m, k) for m in MODELS for k in RECORDINGS)
"""The names of the shipped recordings: each model's name (batch order 0) and
``<model>.order<k>`` (``dls simulate --trace digits_mlp --trace digits_mlp.order1``)."""


def shipped_trace(name: str) -> Path:
    """The shipped trace file of recording ``name`` (one of :data:`SHIPPED_RECORDINGS`: a
    model's name, or ``<model>.order<k>``).

    >>> shipped_trace("digits_mlp").name, shipped_trace("digits_mlp.order1").name
    ('digits_mlp.npz', 'digits_mlp.order1.npz')
    """
    if name not in SHIPPED_RECORDINGS:
        raise ValueError(
            f"a shipped recording is one of {', '.join(SHIPPED_RECORDINGS)}, got {name!r}"
        )
    return SHIPPED_DIR / f"{name}.npz"


HELD_OUT_POLICIES = ("dynamic-fast", "headroom")
"""The checked policies (:data:`sim.replay.measured.CHECKED_POLICIES`) trained again in the batch
orders of :data:`HELD_OUT_ORDERS`: those that skip steps on the models whose steps overflow
(``nnabla-legacy`` skips none)."""
HELD_OUT_ORDERS = {"digits_conv_bn": (3, 4, 5, 6), "sequence_lstm": (3, 4, 5, 6)}
"""Per model whose steps overflow below 2**15, the batch orders of more real runs under
:data:`HELD_OUT_POLICIES` that only check the predictive interval
(``python -m benchmarks.bench_interval``), beside those of :data:`CHECK_ORDERS`: no recording
and no calibration used them (made by ``python -m sim.nnabla_studies.held_out``)."""
