"""A recorder's rows (one :class:`RecordedStep` per recorded step): the trace they make
(:func:`trace_of`) and the exit hook that writes what a recorder never closed recorded
(:func:`write_at_exit`)."""

from __future__ import annotations

import atexit
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Tuple

import numpy as np

from ..common.float16 import FORWARD_NEAR_FACTOR, FP16_OVERFLOW
from .format import Trace
from .parts import finish_merge, merge_parts, part_files, parts_dir, write_part
from .thresholds import check_step
from .values import NBINS, binade_histogram

logger = logging.getLogger("updater.trace.recorder")


@dataclass(frozen=True)
class RecordedStep:
    """One recorded step: a row of the trace (:class:`updater.trace.Trace`'s fields of one
    step).

    Attributes:
        counts (int64 array ``(NBINS,)``), zeros (int), absmax (float): the step's histogram.
        nonfinite (bool): a bad batch.
        overflow_scale (float): the scale from which it overflows (inf: none seen).
        finite_scale (float): the largest scale it was seen finite at (0: not known).
        layers (tuple or None): ``(columns, counts, zeros, absmax)``, the histogram of each
            parameter array and its column among the recorder's layer names; None without
            ``per_parameter``.
        flush (tuple or None): ``(scales, shares)``, float64 arrays ``(K,)``; None: not
            measured.
        forward (tuple or None): ``(peak, where)``; None: not measured.
        probed (bool): ``overflow_scale`` was measured by probes (the trace is
            ``overflow_probed`` when all its steps are).
    """

    counts: np.ndarray
    zeros: int
    absmax: float
    nonfinite: bool
    overflow_scale: float
    finite_scale: float
    layers: Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
    flush: Tuple[np.ndarray, np.ndarray] | None = None
    forward: Tuple[float, str] | None = None
    probed: bool = False


def step_row(
    grads: list,
    scale: float,
    bad: bool,
    overflow_scale: float,
    finite_scale: float,
    columns: np.ndarray | None,
    flush: tuple | None = None,
    forward: tuple | None = None,
) -> RecordedStep:
    """The row of one step (:meth:`updater.trace.recorder.GradientRecorder.record`'s arguments,
    checked there): the histograms of ``grads`` divided by ``scale``, per array in ``columns``
    (None: no layers). Non-finite ``grads`` of a step that is not a bad batch overflowed at
    ``scale``: its threshold is at most ``scale`` and its arrays' ``absmax`` at least
    65520 / ``scale``. ``ValueError`` unless ``finite_scale`` stays below the threshold
    (:func:`updater.trace.thresholds.check_step`) and the forward peak is >= 0."""
    rows = [binade_histogram(np.asarray(g, dtype=np.float64) / scale) for g in grads]
    layer_counts = np.array([r[0] for r in rows], np.int64).reshape(-1, NBINS)
    layer_zeros = np.array([r[1] for r in rows], np.int64)
    layer_absmax = np.array([r[2] for r in rows], np.float64)
    layer_finite = np.array([r[3] for r in rows], bool)
    if not layer_finite.all() and not bad:  # overflowed at this scale
        overflow_scale = min(overflow_scale, scale)
        bound = FP16_OVERFLOW / scale
        layer_absmax[~layer_finite] = np.maximum(layer_absmax[~layer_finite], bound)
    check_step(overflow_scale, finite_scale)
    if forward is not None:
        forward = (float(forward[0]), str(forward[1]))
        if not forward[0] >= 0:
            raise ValueError(f"forward_peak must be a number >= 0, got {forward[0]!r}")
    return RecordedStep(
        counts=layer_counts.sum(axis=0),
        zeros=int(layer_zeros.sum()),
        absmax=float(layer_absmax.max(initial=0.0)),
        nonfinite=bad,
        overflow_scale=overflow_scale,
        finite_scale=finite_scale,
        layers=None if columns is None else (columns, layer_counts, layer_zeros, layer_absmax),
        flush=None if flush is None else tuple(np.asarray(a, dtype=np.float64) for a in flush),
        forward=forward,
    )


def trace_of(
    rows: List[RecordedStep], name: str, layer_names: List[str] | None, every: int = 1
) -> Trace:
    """The :class:`Trace` of a recorder's ``rows`` (per-layer columns by ``layer_names``),
    recorded every ``every`` steps; ``overflow_probed`` when every row was probed."""
    if not rows:
        raise ValueError("no steps recorded yet; call update() before building a trace")
    groups = {}
    if layer_names is not None:  # columns absent from a step stay 0
        shape = (len(rows), len(layer_names))
        c, z, a = np.zeros(shape + (NBINS,), np.int64), np.zeros(shape, np.int64), np.zeros(shape)
        for t, row in enumerate(rows):
            columns, c_t, z_t, a_t = row.layers
            c[t, columns], z[t, columns], a[t, columns] = c_t, z_t, a_t
        groups.update(layer_names=layer_names, layer_counts=c, layer_zeros=z, layer_absmax=a)
    measured = [row.flush for row in rows if row.flush is not None]
    if measured:  # steps without a measurement (bad batches) get NaN rows
        empty = np.full_like(measured[0][0], np.nan)
        groups["flush_scales"] = np.stack([empty if r.flush is None else r.flush[0] for r in rows])
        groups["flush_shares"] = np.stack([empty if r.flush is None else r.flush[1] for r in rows])
    if any(row.forward is not None for row in rows):
        groups["forward_peak"] = [np.nan if r.forward is None else r.forward[0] for r in rows]
        groups["forward_where"] = tuple("" if r.forward is None else r.forward[1] for r in rows)
    return Trace(
        np.stack([row.counts for row in rows]),
        [row.zeros for row in rows],
        [row.absmax for row in rows],
        [row.nonfinite for row in rows],
        name,
        [row.overflow_scale for row in rows],
        overflow_probed=all(row.probed for row in rows),
        finite_scale=[row.finite_scale for row in rows],
        every=every,
        **groups,
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
    rows: List[RecordedStep],
    written: List[int],
    parts: List[int],
    lock: list,
    path: Path,
    name: str,
    layer_names: List[str] | None,
    every: int = 1,
) -> None:
    """A recorder's exit hook: write the steps recorded since its last write, if any, merge
    the parts written (or finish a merge a Ctrl-C interrupted) and release the lock. A failure
    is printed to stderr, loudly, with what was lost and what is left; at interpreter exit the
    process then exits with status 1. Its arguments are the recorder's state, shared since the
    hook holds no reference to the recorder."""
    try:
        if parts[0]:
            if rows:
                write_part(path, parts[0], trace_of(rows, name, layer_names, every))
            if not finish_merge(path) and part_files(path):  # else a merge completed
                merge_parts(path, name)
                logger.info("GradientRecorder merged its parts into %s at exit", path)
        elif len(rows) > written[0]:
            trace_of(rows, name, layer_names, every).save(path)
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
