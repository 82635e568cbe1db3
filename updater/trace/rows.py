"""A recorder's rows (one :class:`RecordedStep` per recorded step): the trace they make
(:func:`trace_of`), what a recorder shares with its exit hook (:class:`Held`: the rows, the
parts written, their writing and merging) and the exit hook that writes what a recorder never
closed recorded (:func:`write_at_exit`)."""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Tuple

import numpy as np

from ..common.float16 import FORWARD_NEAR_FACTOR, FP16_OVERFLOW
from ..common.names import shown
from .exits import EXITING
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


@dataclass
class Held:
    """What a recorder shares with its exit hook, which holds no reference to the recorder.

    Attributes:
        path (Path), name (str), layer_names (list or None), every (int): the recorder's.
        recording (str): the recording's id, written into each part.
        rows (list of RecordedStep): the steps recorded since the last part.
        lock (list): the path's :class:`updater.trace.parts.PartsLock` while it is held.
        written (int): rows already in the file at ``path`` (written without parts).
        parts (int): parts written since the last merge.
        merged (bool): the file at ``path`` holds the steps a ``close()`` merged, which the
            next parts continue.
    """

    path: Path
    name: str
    layer_names: List[str] | None
    every: int
    recording: str
    rows: List[RecordedStep] = field(default_factory=list)
    lock: list = field(default_factory=list)
    written: int = 0
    parts: int = 0
    merged: bool = False

    def recent(self) -> Trace:
        """The trace of :attr:`rows`."""
        return trace_of(self.rows, self.name, self.layer_names, self.every)

    def write_part(self) -> None:
        """Write :attr:`rows` as the next part and drop them; the trace a ``close()`` merged
        becomes part 0 first, so that the next merge keeps its steps."""
        if self.parts == 0 and self.merged:
            write_part(self.path, 0, Trace.load(self.path), self.recording)
            self.parts = 1
        write_part(self.path, self.parts, self.recent(), self.recording)
        self.parts += 1
        self.rows.clear()
        self.written = 0

    def write(self) -> Path:
        """Write every step recorded to ``path``: with parts (or after a merge) the rows
        become the last part and the parts are merged; else the rows are the trace."""
        if self.parts or (self.merged and self.rows):
            if self.rows:
                self.write_part()
            merge_parts(self.path, self.name, self.recording)
            self.parts, self.merged = 0, True
        else:
            self.recent().save(self.path)
            self.written = len(self.rows)
        return self.path

    def pending(self) -> bool:
        """Whether steps are recorded that ``path`` does not hold yet."""
        return bool(self.parts or len(self.rows) > self.written)


def write_at_exit(held: Held) -> None:
    """A recorder's exit hook: write the steps recorded since its last write, if any, merge
    the parts written (or finish a merge a Ctrl-C interrupted) and release the lock. A failure
    is printed to stderr, loudly, with what was lost and what is left; at interpreter exit the
    process then exits with status 1."""
    rows, path = held.rows, held.path
    try:
        if not finish_merge(path) and held.pending():
            held.write()
            logger.info("GradientRecorder wrote %s at exit", shown(path))
    except Exception as e:
        kept = (
            f"; the parts written are kept in {shown(parts_dir(path))}" if part_files(path) else ""
        )
        sys.stderr.write(
            f"ERROR: GradientRecorder could not write {shown(path)} at exit, {len(rows)} recorded "
            f"steps are lost{kept}: {e}\n(close() it, or use a with block, to handle this)\n"
        )
        if EXITING:  # at interpreter exit: the exit status says it too
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
        return
    if held.lock:
        held.lock.pop().release()


def warn_forward(path: Path, step: int, peak: float, where: str) -> None:
    """Log that the float16 forward pass of recorded ``step`` came within
    :data:`updater.common.float16.FORWARD_NEAR_FACTOR` of 65504 (``peak`` x 65504 in ``where``)."""
    logger.warning(
        "GradientRecorder %s: the float16 forward pass came within a factor %g of 65504 at step "
        "%d: %.3g x 65504 in %s; no loss scale causes or cures an overflow there: compute that "
        "function in float32 with updater.amp.rewrite",
        *(shown(path), FORWARD_NEAR_FACTOR, step, peak, where),
    )
