"""A recorder's rows: the steps it keeps until it writes them (:class:`KeptStep`), their rows
when written (:func:`step_row`: one :class:`RecordedStep` per step, each group of the trace
holding its part, :class:`updater.trace.group.Group`), the trace they make (:func:`trace_of`,
each group's fields from its parts), what a recorder shares with its exit hook (:class:`Held`:
the steps kept, the parts written, their writing and merging) and the exit hook that writes
what a recorder never closed recorded (:func:`write_at_exit`)."""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List

import numpy as np

from ..common.float16 import FORWARD_NEAR_FACTOR
from ..common.names import shown
from .exits import EXITING
from .format import GROUPS, Trace
from .measured import ArrayHistograms, MeasuredStep
from .parts import finish_merge, merge_parts, part_files, parts_dir, write_part

logger = logging.getLogger("updater.trace.recorder")


@dataclass(frozen=True, kw_only=True, slots=True)
class KeptStep:
    """A recorded step as a recorder keeps it until it writes it (its row is made then,
    :func:`step_row`).

    Attributes:
        step (MeasuredStep): the step without its gradients
            (:meth:`updater.trace.measured.MeasuredStep.reduced`).
        arrays (ArrayHistograms): their histograms.
        parts (dict): the parts of the groups whose probe measured the step (by ``KEY``, made
            when it was recorded: :meth:`updater.trace.group.Group.row_checked`).
    """

    step: MeasuredStep
    arrays: ArrayHistograms
    parts: Dict[str, dict]


@dataclass(frozen=True, kw_only=True)
class RecordedStep:
    """One recorded step: a row of the trace (:class:`updater.trace.Trace`'s fields of one
    step).

    Attributes:
        counts (int64 array ``(NBINS,)``), zeros (int), absmax (float): the step's histogram.
        nonfinite (bool): a bad batch.
        parts (dict): each group's part of the row by its ``KEY``
            (:meth:`updater.trace.group.Group.row_part`: the group's fields at this step; None:
            not measured).
    """

    counts: np.ndarray
    zeros: int
    absmax: float
    nonfinite: bool
    parts: Dict[str, dict | None]


def step_row(kept: KeptStep, layer_names: List[str] | None) -> RecordedStep:
    """The row of a step kept: its histogram and each group's part of it (a group that makes a
    part of every step, :attr:`updater.trace.group.Group.PROBED` False, makes it now);
    ``layer_names``: the recorder's, None without ``per_parameter``."""
    step, arrays = kept.step, kept.arrays
    parts = {
        g.KEY: kept.parts.get(g.KEY) if g.PROBED else g.row_part(step, arrays, layer_names)
        for g in GROUPS
    }
    return RecordedStep(
        counts=arrays.counts.sum(axis=0),
        zeros=int(arrays.zeros.sum()),
        absmax=float(arrays.absmax.max(initial=0.0)),
        nonfinite=step.bad_batch,
        parts=parts,
    )


def trace_of(
    rows: List[RecordedStep], name: str, layer_names: List[str] | None, every: int = 1
) -> Trace:
    """The :class:`Trace` of a recorder's ``rows`` (per-layer columns by ``layer_names``),
    recorded every ``every`` steps: each group's fields from its parts of the rows
    (:meth:`updater.trace.group.Group.from_rows`)."""
    if not rows:
        raise ValueError("no steps recorded yet; call update() before building a trace")
    fields = {}
    for group in GROUPS:
        fields.update(group.from_rows([row.parts[group.KEY] for row in rows], layer_names))
    return Trace(
        np.stack([row.counts for row in rows]),
        [row.zeros for row in rows],
        [row.absmax for row in rows],
        [row.nonfinite for row in rows],
        name,
        every=every,
        **fields,
    )


@dataclass
class Held:
    """What a recorder shares with its exit hook, which holds no reference to the recorder.

    Attributes:
        path (Path), name (str), layer_names (list or None), every (int): the recorder's.
        recording (str): the recording's id, written into each part.
        kept (list of KeptStep): the steps recorded since the last part (made rows when
            written: :func:`step_row`).
        lock (list): the path's :class:`updater.trace.parts.PartsLock` while it is held.
        written (int): steps of :attr:`kept` already in the file at ``path`` (written without
            parts).
        parts (int): parts written since the last merge.
        merged (bool): the file at ``path`` holds the steps a ``close()`` merged, which the
            next parts continue.
    """

    path: Path
    name: str
    layer_names: List[str] | None
    every: int
    recording: str
    kept: List[KeptStep] = field(default_factory=list)
    lock: list = field(default_factory=list)
    written: int = 0
    parts: int = 0
    merged: bool = False

    def recent(self) -> Trace:
        """The trace of :attr:`kept` (their rows: :func:`step_row`)."""
        rows = [step_row(kept, self.layer_names) for kept in self.kept]
        return trace_of(rows, self.name, self.layer_names, self.every)

    def write_part(self) -> None:
        """Write :attr:`kept` as the next part and drop them; the trace a ``close()`` merged
        becomes part 0 first, so that the next merge keeps its steps."""
        if self.parts == 0 and self.merged:
            write_part(self.path, 0, Trace.load(self.path), self.recording)
            self.parts = 1
        write_part(self.path, self.parts, self.recent(), self.recording)
        self.parts += 1
        self.kept.clear()
        self.written = 0

    def write(self) -> Path:
        """Write every step recorded to ``path``: with parts (or after a merge) the steps
        kept become the last part and the parts are merged; else they are the trace."""
        if self.parts or (self.merged and self.kept):
            if self.kept:
                self.write_part()
            merge_parts(self.path, self.name, self.recording)
            self.parts, self.merged = 0, True
        else:
            self.recent().save(self.path)
            self.written = len(self.kept)
        return self.path

    def pending(self) -> bool:
        """Whether steps are recorded that ``path`` does not hold yet."""
        return bool(self.parts or len(self.kept) > self.written)


def write_at_exit(held: Held) -> None:
    """A recorder's exit hook: write the steps recorded since its last write, if any, merge
    the parts written (or finish a merge a Ctrl-C interrupted) and release the lock. A failure
    is printed to stderr, loudly, with what was lost and what is left; at interpreter exit the
    process then exits with status 1."""
    steps, path = held.kept, held.path
    try:
        if not finish_merge(path) and held.pending():
            held.write()
            logger.info("GradientRecorder wrote %s at exit", shown(path))
    except Exception as e:
        kept = (
            f"; the parts written are kept in {shown(parts_dir(path))}" if part_files(path) else ""
        )
        sys.stderr.write(
            f"ERROR: GradientRecorder could not write {shown(path)} at exit, {len(steps)} recorded "
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
