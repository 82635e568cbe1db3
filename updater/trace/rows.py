"""A recorder's rows (one tuple per recorded step): the trace they make (:func:`trace_of`) and
the exit hook that writes what a recorder never closed recorded (:func:`write_at_exit`)."""

from __future__ import annotations

import atexit
import logging
import os
import sys
from pathlib import Path
from typing import List

import numpy as np

from ..common.float16 import FORWARD_NEAR_FACTOR
from .format import Trace
from .parts import finish_merge, merge_parts, part_files, parts_dir, write_part
from .values import NBINS

logger = logging.getLogger("updater.trace.recorder")


def trace_of(
    rows: List[tuple],
    name: str,
    layer_names: List[str] | None,
    probed: bool = False,
    every: int = 1,
) -> Trace:
    """The :class:`Trace` of a recorder's ``rows`` (per-layer columns by ``layer_names``),
    recorded every ``every`` steps."""
    if not rows:
        raise ValueError("no steps recorded yet; call update() before building a trace")
    counts, zeros, absmax, bad, over, layers, flush, seen_finite, forward = zip(*rows)
    per_layer = {}
    if layer_names is not None:  # columns absent from a step stay 0
        shape = (len(rows), len(layer_names))
        c, z, a = np.zeros(shape + (NBINS,), np.int64), np.zeros(shape, np.int64), np.zeros(shape)
        for t, (columns, c_t, z_t, a_t) in enumerate(layers):
            c[t, columns], z[t, columns], a[t, columns] = c_t, z_t, a_t
        per_layer = dict(layer_names=layer_names, layer_counts=c, layer_zeros=z, layer_absmax=a)
    measured = [f for f in flush if f is not None]
    if measured:  # steps without a measurement (bad batches) get NaN rows
        empty = np.full_like(measured[0][0], np.nan)
        per_layer["flush_scales"] = np.stack([empty if f is None else f[0] for f in flush])
        per_layer["flush_shares"] = np.stack([empty if f is None else f[1] for f in flush])
    if any(f is not None for f in forward):
        per_layer["forward_peak"] = [np.nan if f is None else f[0] for f in forward]
        per_layer["forward_where"] = tuple("" if f is None else f[1] for f in forward)
    return Trace(
        np.stack(counts),
        zeros,
        absmax,
        bad,
        name,
        over,
        overflow_probed=probed,
        finite_scale=seen_finite,
        every=every,
        **per_layer,
    )


_EXITING: List[bool] = []  # True once the interpreter exits
_WATCHING: List[bool] = []


def watch_exit() -> None:
    """Note the interpreter's exit before the exit hooks run: call it after making a
    ``weakref.finalize`` (``atexit`` runs the last registered first, and finalizers run from
    the hook ``weakref`` registered when the first one was made)."""
    if not _WATCHING:
        _WATCHING.append(True)
        atexit.register(_EXITING.append, True)


def write_at_exit(
    rows: List[tuple],
    written: List[int],
    parts: List[int],
    lock: list,
    path: Path,
    name: str,
    layer_names: List[str] | None,
    probed: bool,
    every: int = 1,
) -> None:
    """A recorder's exit hook: write the steps recorded since its last write, if any, merge
    the parts written (or finish a merge a Ctrl-C interrupted) and release the lock. A failure
    is printed to stderr, loudly, with what was lost and what is left; at interpreter exit the
    process then exits with status 1."""
    try:
        if parts[0]:
            if rows:
                write_part(path, parts[0], trace_of(rows, name, layer_names, probed, every))
            if not finish_merge(path) and part_files(path):  # else a merge completed
                merge_parts(path, name)
                logger.info("GradientRecorder merged its parts into %s at exit", path)
        elif len(rows) > written[0]:
            trace_of(rows, name, layer_names, probed, every).save(path)
            logger.info("GradientRecorder wrote %d steps to %s at exit", len(rows), path)
    except Exception as e:
        kept = f"; the parts written are kept in {parts_dir(path)}" if part_files(path) else ""
        sys.stderr.write(
            f"ERROR: GradientRecorder could not write {path} at exit, {len(rows)} recorded "
            f"steps are lost{kept}: {e}\n(close() it, or use a with block, to handle this)\n"
        )
        if _EXITING:  # at interpreter exit: the exit status says it too
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
        return
    if lock:
        lock.pop().release()


def warn_forward(path: Path, step: int, peak: float, where: str) -> None:
    """Log that the float16 forward pass of recorded ``step`` came within
    :data:`updater.common.float16.FORWARD_NEAR_FACTOR` of 65504 (``peak`` x 65504 in ``where``)."""
    logger.warning(
        "GradientRecorder %s: the float16 forward pass came within a factor %g of 65504 at step "
        "%d: %.3g x 65504 in %s; no loss scale causes or cures an overflow there: compute that "
        "function in float32 with updater.amp.rewrite",
        *(path, FORWARD_NEAR_FACTOR, step, peak, where),
    )
