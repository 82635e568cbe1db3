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


def shipped_trace(model: str) -> Path:
    """The shipped trace file of ``model`` (one of :data:`MODELS`).

    >>> shipped_trace("digits_mlp").name
    'digits_mlp.npz'
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
    return SHIPPED_DIR / f"{model}.npz"
