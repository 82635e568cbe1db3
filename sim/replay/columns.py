"""Per-run reductions of the replay's ``(steps, runs)`` arrays (one column a run), each the bits
of the plain NumPy expression it names, in fewer or cheaper passes: the metrics
(:mod:`sim.replay.metrics`, :mod:`sim.replay.flush_basis`) of 10,000,000 runs are made of them."""

from __future__ import annotations

import numpy as np


def count_true(flags: np.ndarray, dtype=np.int64) -> np.ndarray:
    """Per column of a bool ``(steps, runs)`` array, its True values as ``dtype`` ``(runs,)``:
    ``flags.sum(axis=0, dtype=dtype)``. Counted in uint8 when there are fewer than 256 rows
    (exact, and several times faster than a bool sum, which converts every value first)."""
    if flags.shape[0] < 256:
        return np.add.reduce(flags.view(np.uint8), axis=0, dtype=np.uint8).astype(dtype)
    return flags.sum(axis=0, dtype=dtype)


def applied_sum(skipped: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per column, the sum of float64 ``values`` over the steps not ``skipped`` (both
    ``(steps, runs)``): the bits of ``np.where(skipped, 0.0, values).sum(axis=0)``, the skipped
    values' bits cleared by a mask instead of a masked select (which is several times slower)."""
    values = np.asarray(values)
    if values.dtype != np.float64:
        return np.where(skipped, 0.0, values).sum(axis=0)
    keep = np.subtract(skipped, 1, dtype=np.int64)  # all bits set on an applied step, else none
    np.bitwise_and(values.view(np.int64), keep, out=keep)
    return keep.view(np.float64).sum(axis=0)


FIRST_BY_ROWS = 64
""":func:`first_true` walks the rows when a block has at least this many times more runs than
steps (each row one call over many runs), else it asks ``argmax`` (one call per column)."""


def first_true(flags: np.ndarray) -> tuple:
    """Per column of a bool ``(steps, runs)`` array: ``(first, found)``, the index of its first
    True row (int64; any value where there is none) and whether there is one (bool)."""
    steps, runs = flags.shape
    if runs < FIRST_BY_ROWS * steps:
        first = np.argmax(flags, axis=0)
        return first, flags[first, np.arange(runs)]
    before = np.logical_not(flags[0])  # no True yet, up to this row
    first = before.astype(np.int64)
    for row in flags[1:]:
        before &= ~row
        first += before
    return first, first < steps
