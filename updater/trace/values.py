"""The checks of what a trace holds per step, NumPy only: its counts, magnitudes and names (the
binade histogram of a step's gradient values is :mod:`updater.trace.measured`'s)."""

from __future__ import annotations

import numpy as np

from ..common.npz import MAX_TEXT
from .measured import EXP_MAX, EXP_MIN, NBINS, binade_histogram  # here in 0.1.0: still here

__all__ = [
    "EXP_MAX",
    "EXP_MIN",
    "MAX_COUNT",
    "NBINS",
    "binade_histogram",
    "check_counts",
    "check_label",
    "check_magnitudes",
    "layer_columns",
]


def check_label(what: str, text) -> str:
    """``text`` if it is printable text (a name shown in tables and messages) of at most
    :data:`updater.common.npz.MAX_TEXT` characters, else ``TypeError``/``ValueError`` naming
    ``what``: no newlines, ANSI escapes or other control characters.

    >>> check_label("name", "fc1/affine/W")
    'fc1/affine/W'
    """
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str, got {text!r}")
    if not text.isprintable():
        raise ValueError(
            f"{what} must be printable text (no newlines or control characters), got {text!r}"
        )
    if len(text) > MAX_TEXT:  # what a trace file may hold (updater.common.npz.dtype_problem)
        raise ValueError(f"{what} must hold at most {MAX_TEXT:,} characters, got {len(text):,}")
    return text


MAX_COUNT = 2**53
"""Most values one step may count (its bins and zeros together): beyond it a file's counts are
wrapped or made up, and sums of them would lose exactness."""


def check_counts(name: str, counts: np.ndarray, zeros: np.ndarray | None = None) -> None:
    """``ValueError`` unless every count is >= 0 and each step's total (with ``zeros``) stays
    within :data:`MAX_COUNT`."""
    if (counts < 0).any():
        step = np.argwhere(counts < 0)[0]
        raise ValueError(f"{name} must be >= 0; step {step[0]} holds {counts[tuple(step)]}")
    if zeros is not None:
        total = counts.reshape(counts.shape[0], -1).sum(axis=1, dtype=np.float64)
        total += zeros.reshape(zeros.shape[0], -1).sum(axis=1, dtype=np.float64)
        if (total > MAX_COUNT).any():
            step = int(np.flatnonzero(total > MAX_COUNT)[0])
            raise ValueError(
                f"{name} with zeros count {total[step]:.3g} values at step {step}, more than "
                f"{MAX_COUNT:.3g}: wrapped or made up"
            )


def check_magnitudes(name: str, values: np.ndarray) -> None:
    """``ValueError`` unless every value is finite and >= 0."""
    bad = ~((values >= 0) & (values < np.inf))  # NaN fails both
    if bad.any():
        step = np.argwhere(bad)[0]
        raise ValueError(
            f"{name} must hold finite magnitudes >= 0; step {step[0]} holds {values[tuple(step)]!r}"
        )


def layer_columns(layer_names: list, names, n: int) -> np.ndarray:
    """The trace columns of ``names`` (checked) among ``layer_names``, which gains the names
    not seen before."""
    if names is None:
        raise ValueError(
            "names must list the parameter names of grads (same order) when "
            "per_parameter=True, got None"
        )
    if isinstance(names, str) or not all(isinstance(x, str) for x in names):
        raise TypeError(f"names must be a list of str, got {names!r}")
    names = list(names)
    if len(names) != n or len(set(names)) != n:
        raise ValueError(
            f"names must hold {n} distinct names (one per gradient array), got "
            f"{len(names)} ({len(set(names))} distinct)"
        )
    known = set(layer_names)
    for name in names:
        if name not in known:
            check_label("names", name)
    layer_names.extend(x for x in names if x not in known)
    column = {x: i for i, x in enumerate(layer_names)}
    return np.array([column[x] for x in names], np.int64)
