"""The gradient-trace format: the contract between training and simulation (NumPy only).

A trace holds, for each training step, a histogram of nonzero finite gradient magnitudes by
binade (bin ``i`` counts values ``v`` with ``floor(log2|v|) == EXP_MIN + i``; values outside the
range land in the end bins), the count of exact zeros, the largest magnitude (unscaled),
whether the step is non-finite whatever the scale (a bad batch: the loss itself was inf/NaN), and
the smallest loss scale at which the step was seen to overflow (``overflow_scale``, inf when it
never was), and the largest scale at which probes saw it finite (``finite_scale``, 0 when not
known). :class:`updater.trace.recorder.GradientRecorder` writes it from a training run; the
simulator (:mod:`sim.traces.families` makes synthetic ones, :mod:`sim.replay.run` replays them)
reads it. Optionally (``GradientRecorder(per_parameter=True)``) a trace also holds the same
statistics for each parameter array ("layers": ``fc1/affine/W`` and ``fc1/affine/b`` are two),
which :mod:`sim.replay.layers` analyses.

Overflow versus bad batch. A bad batch (``nonfinite``) is skipped at every scale. An overflow is
a property of a scale: a step recorded as overflowing at scale ``s_o`` (finite loss, inf/NaN
gradients) overflows at every scale ``>= s_o`` and replays as a normal step below it, unless its
``absmax`` says otherwise (see :mod:`sim.replay.run`). The threshold is stored, not derived from
``absmax``, because the overflow can happen in intermediate backward values that no parameter
gradient shows. Synthetic families record no overflow (``overflow_scale`` all inf): their
overflows follow from ``absmax`` alone.

Censored steps. A probed step still finite at the highest scale ``S`` the probes tried is stored
as "above S": ``overflow_scale`` inf and ``finite_scale`` S. Nothing is known of it above ``S``;
at or below ``S`` it never overflows (the replay holds to that, jitter or not).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Union

import numpy as np

from ..common.npz import write_npz
from ..common.validation import check_int
from ..common.writing import write_file
from .archive import FORMAT_VERSION, read_trace, trace_arrays
from .flush import FlushCurve
from .forward import ForwardHeadroom
from .layers import Layers
from .measured import NBINS, binade_histogram
from .thresholds import Thresholds
from .values import check_counts, check_label, check_magnitudes

logger = logging.getLogger(__name__)

__all__ = ["FORMAT_VERSION", "GROUPS", "Trace"]  # FORMAT_VERSION: its home before archive.py

GROUPS = (Thresholds, Layers, FlushCurve, ForwardHeadroom)
"""The trace's groups of fields (:class:`updater.trace.group.Group`), in the order the trace's
:func:`repr` names them."""


@dataclass(init=False, repr=False)
class Trace:
    """Per-step gradient-magnitude statistics.

    The fields other than the first five and ``every`` come in groups, each a sub-record
    (:data:`GROUPS`): ``thresholds`` (:class:`~updater.trace.thresholds.Thresholds`: the overflow
    scales, always there), ``layers`` (:class:`~updater.trace.layers.Layers`), ``flush``
    (:class:`~updater.trace.flush.FlushCurve`) and ``forward``
    (:class:`~updater.trace.forward.ForwardHeadroom`), None when the trace does not hold them.
    The trace reads and writes their fields under their own names (``trace.flush_scales`` is
    ``trace.flush.flush_scales``); setting one checks its group again. The constructor takes
    them by name too, or a group whole (``flush=``; :func:`dataclasses.replace` works).

    Attributes:
        counts: int64 array ``(steps, NBINS)`` of nonzero finite magnitudes per binade.
        zeros: int64 array ``(steps,)`` of exact zeros per step.
        absmax: float64 array ``(steps,)`` of the largest finite magnitude per step (unscaled).
        nonfinite: bool array ``(steps,)``, True where the step is bad whatever the scale
            (a non-finite loss: bad data, not overflow).
        name: a label for plots and tables.
        overflow_scale: float64 array ``(steps,)``, > 0: the smallest loss scale at which the
            step was seen to overflow (finite loss, inf/NaN gradients); inf where it never was.
            The step overflows at every scale at or above it. None (the default) means all inf.
        layer_names: tuple of ``P`` distinct str, one per parameter array, or None (no layers;
            the default). The four ``layer_*`` fields are given together or not at all.
        layer_counts: int64 array ``(steps, P, NBINS)``: ``counts`` per parameter array;
            summed over the arrays it equals ``counts`` at every step.
        layer_zeros: int64 array ``(steps, P)``: ``zeros`` per parameter array (sums to
            ``zeros``). An array absent from a step (added later in training) has zero counts
            and zeros there.
        layer_absmax: float64 array ``(steps, P)``: ``absmax`` per parameter array (0.0 where
            it has no nonzero finite value).
        overflow_probed (bool): ``overflow_scale`` was measured by probes (the smallest
            power-of-two scale at which the step's backward overflowed within the policy's
            bounds; inf: none did), not only seen at the scales training used.
        flush_scales, flush_shares: float64 arrays ``(steps, K)`` or None (the default): the
            share of nonzero gradient values float16 flushed to zero, measured against a float32
            computation of the step at those scales (NaN where not measured). Given together.
        finite_scale: float64 array ``(steps,)``, >= 0 and below ``overflow_scale``: the largest
            scale at which probes (or the recorded attempt) saw the step finite; 0 where not
            known. None (the default) means all 0. With ``overflow_scale`` inf it marks a
            censored step ("above ``finite_scale``", module doc).
        forward_peak: float64 array ``(steps,)`` or None (the default): the largest |value| the
            float16 forward pass produced, relative to 65504 (inf: inf/NaN; NaN: not measured).
        forward_where: tuple of ``steps`` str or None: the function that produced it
            (``<type>#<k>``; BatchNormalization's batch variance is marked). Given together.
        every (int, default 1): training steps per recorded step (``GradientRecorder(every=N)``
            records the first of every ``N`` ``update()`` calls); the replay runs each recorded
            step ``every`` times (:func:`sim.replay.clock.training_clock`).
    """

    counts: np.ndarray
    zeros: np.ndarray
    absmax: np.ndarray
    nonfinite: np.ndarray
    name: str = "trace"
    every: int = 1
    thresholds: Thresholds | None = None
    layers: Layers | None = None
    flush: FlushCurve | None = None
    forward: ForwardHeadroom | None = None

    def __init__(
        self,
        counts,
        zeros,
        absmax,
        nonfinite,
        name: str = "trace",
        overflow_scale=None,
        *,
        every: int = 1,
        **fields,
    ):
        self.counts = np.asarray(counts, dtype=np.int64)
        self.zeros = np.asarray(zeros, dtype=np.int64)
        self.absmax = np.asarray(absmax, dtype=np.float64)
        self.nonfinite = np.asarray(nonfinite, dtype=bool)
        steps = self.counts.shape[0]
        if self.counts.ndim != 2 or self.counts.shape[1] != NBINS:
            raise ValueError(f"counts must have shape (steps, {NBINS}), got {self.counts.shape}")
        if steps == 0:
            raise ValueError("a trace needs at least one step, got 0")
        self.name = check_label("name", name)
        self.every = check_int("every", every, 1)
        for field in ("zeros", "absmax", "nonfinite"):
            shape = getattr(self, field).shape
            if shape != (steps,):
                raise ValueError(f"{field} must have shape ({steps},), got {shape}")
        check_counts("counts", self.counts, self.zeros)
        check_counts("zeros", self.zeros)
        check_magnitudes("absmax", self.absmax)
        if overflow_scale is not None:
            fields["overflow_scale"] = overflow_scale
        for group in GROUPS:
            whole = fields.pop(group.KEY, None)
            given = {} if whole is None else whole.values()
            given.update((f, fields.pop(f)) for f in group.names() if f in fields)
            setattr(self, group.KEY, group.of(self, given))
        if fields:
            raise TypeError(f"Trace() got unexpected keyword arguments {sorted(fields)}")

    @property
    def has_forward(self) -> bool:
        """Whether the trace holds the forward pass's measured headroom."""
        return self.forward is not None

    @property
    def has_flush(self) -> bool:
        """Whether the trace holds measured flushed shares."""
        return self.flush is not None

    def __repr__(self) -> str:
        """One line: the name, the steps and what the trace holds besides the histograms."""
        parts = [f"name={self.name!r}", f"steps={self.steps}"]
        parts.append(f"nonfinite_steps={int(self.nonfinite.sum())}")
        for group in GROUPS:
            held = getattr(self, group.KEY)
            if held is not None and held.describe():
                parts.append(held.describe())
        return f"Trace({', '.join(parts)})"

    def take(self, index) -> Trace:
        """The trace of the steps at ``index`` (int array; repeats allowed), every group with
        them; the name and ``every`` kept."""
        index = np.asarray(index, dtype=np.int64)
        groups = {g.KEY: getattr(self, g.KEY) for g in GROUPS}
        return Trace(
            self.counts[index],
            self.zeros[index],
            self.absmax[index],
            self.nonfinite[index],
            self.name,
            every=self.every,
            **{k: None if g is None else g.take(index) for k, g in groups.items()},
        )

    @property
    def steps(self) -> int:
        """Number of recorded steps."""
        return int(self.counts.shape[0])

    @property
    def training_steps(self) -> int:
        """Number of training steps the recording spans: ``steps * every``."""
        return self.steps * self.every

    @property
    def has_layers(self) -> bool:
        """Whether the trace holds per-layer (per parameter array) statistics."""
        return self.layers is not None

    @classmethod
    def from_steps(cls, step_values, name: str = "trace") -> Trace:
        """Build a trace from an iterable of per-step gradient arrays (unscaled).

        A step holding inf/NaN is a bad batch (``nonfinite``); no overflow is recorded: overflow
        follows from ``absmax`` at replay. (Recording overflows from a run: the updater's
        ``GradientRecorder``.)
        """
        rows = [binade_histogram(v) for v in step_values]
        if not rows:
            raise ValueError("step_values must hold at least one step, got none")
        counts, zeros, absmax, finite = zip(*rows)
        return cls(np.stack(counts), zeros, absmax, ~np.asarray(finite), name=name)

    def save(self, path: Union[str, Path], overwrite: bool = False) -> Path:
        """Write the trace to ``path`` (.npz) with :func:`updater.common.writing.write_file`
        (atomic; a file dls did not write is replaced only with ``overwrite=True``); return
        the path."""
        return write_file(path, self.write_to, overwrite, kind="trace")

    def write_to(self, f: BinaryIO) -> None:
        """Write the trace's ``.npz`` archive into the open binary file ``f``."""
        write_npz(f, trace_arrays(self, GROUPS), "trace", compress=True)

    @classmethod
    def load(cls, path: Union[str, Path], max_bytes: int | None = None) -> Trace:
        """Read a trace written by :meth:`save` (or by the updater's gradient recorder);
        ``max_bytes`` bounds what it may unpack to (None: half the physical memory; see
        :func:`updater.common.npz.read_npz`).

        Files of format version 1 (no ``overflow_scale``) load with ``overflow_scale`` all inf:
        their recorded overflows were stored as ``nonfinite`` and stay bad batches. Files of
        versions 1 and 2 load without layers, files before version 4 without probes or flush
        measurements, files before version 5 with ``finite_scale`` all 0 (not known), files
        before version 6 with ``every`` 1.

        Raises:
            OSError: the file is missing, a folder or unreadable.
            ValueError: the file is not a gradient trace (empty, truncated, not an ``.npz``,
                arrays missing, of the wrong kind or inconsistent: the declared shapes are
                checked against the steps and binades of ``counts`` before any array is
                inflated) or of a newer or unknown format; the message names the file and the
                problem.
        """
        return read_trace(cls, GROUPS, path, max_bytes)


def _group_field(group, field: str) -> property:
    """The trace's property of ``field`` of ``group``: None when the trace does not hold the
    group; setting it checks the group again."""

    def read(trace: Trace):
        held = getattr(trace, group.KEY)
        return None if held is None else getattr(held, field)

    def write(trace: Trace, value) -> None:
        held = getattr(trace, group.KEY)
        given = {} if held is None else held.values()
        setattr(trace, group.KEY, group.of(trace, {**given, field: value}))

    return property(read, write, doc=f"``{group.KEY}.{field}`` (None without ``{group.KEY}``).")


for _group in GROUPS:
    for _field in _group.names():
        setattr(Trace, _field, _group_field(_group, _field))
