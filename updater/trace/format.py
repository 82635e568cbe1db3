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
from .archive import FORMAT_VERSION, LAYER_FIELDS, read_trace, trace_arrays
from .values import (
    NBINS,
    binade_histogram,
    check_counts,
    check_label,
    check_magnitudes,
)

logger = logging.getLogger(__name__)

__all__ = ["FORMAT_VERSION", "Trace"]  # FORMAT_VERSION: its home before archive.py


@dataclass
class Trace:
    """Per-step gradient-magnitude statistics.

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
    overflow_scale: np.ndarray | None = None
    layer_names: tuple | None = None
    layer_counts: np.ndarray | None = None
    layer_zeros: np.ndarray | None = None
    layer_absmax: np.ndarray | None = None
    overflow_probed: bool = False
    flush_scales: np.ndarray | None = None
    flush_shares: np.ndarray | None = None
    finite_scale: np.ndarray | None = None
    forward_peak: np.ndarray | None = None
    forward_where: tuple | None = None
    every: int = 1

    def __post_init__(self):
        self.counts = np.asarray(self.counts, dtype=np.int64)
        self.zeros = np.asarray(self.zeros, dtype=np.int64)
        self.absmax = np.asarray(self.absmax, dtype=np.float64)
        self.nonfinite = np.asarray(self.nonfinite, dtype=bool)
        steps = self.counts.shape[0]
        if self.counts.ndim != 2 or self.counts.shape[1] != NBINS:
            raise ValueError(f"counts must have shape (steps, {NBINS}), got {self.counts.shape}")
        if steps == 0:
            raise ValueError("a trace needs at least one step, got 0")
        check_label("name", self.name)
        self.every = check_int("every", self.every, 1)
        if self.overflow_scale is None:
            self.overflow_scale = np.full(steps, np.inf)
        self.overflow_scale = np.array(self.overflow_scale, dtype=np.float64)
        if self.finite_scale is None:
            self.finite_scale = np.zeros(steps)
        self.finite_scale = np.array(self.finite_scale, dtype=np.float64)
        for name in ("zeros", "absmax", "nonfinite", "overflow_scale", "finite_scale"):
            shape = getattr(self, name).shape
            if shape != (steps,):
                raise ValueError(f"{name} must have shape ({steps},), got {shape}")
        if not (self.overflow_scale > 0).all():  # also catches NaN
            bad = self.overflow_scale[~(self.overflow_scale > 0)][0]
            raise ValueError(
                f"overflow_scale must hold numbers > 0 (inf where the step never overflowed), "
                f"got {bad!r}"
            )
        check_counts("counts", self.counts, self.zeros)
        check_counts("zeros", self.zeros)
        check_magnitudes("absmax", self.absmax)
        ok = (self.finite_scale >= 0) & (self.finite_scale < self.overflow_scale)
        if not ok.all():  # also catches NaN
            t = int(np.flatnonzero(~ok)[0])
            raise ValueError(
                f"finite_scale must hold numbers >= 0 (0: not known) below overflow_scale, got "
                f"{self.finite_scale[t]!r} at step {t} (overflow_scale {self.overflow_scale[t]!r})"
            )
        given = [getattr(self, name) is not None for name in LAYER_FIELDS]
        if any(given) and not all(given):
            raise ValueError(
                f"{', '.join(LAYER_FIELDS)} must be given together or not at all; got only "
                f"{', '.join(n for n, g in zip(LAYER_FIELDS, given) if g)}"
            )
        if all(given):
            self._check_layers()
        self.overflow_probed = bool(self.overflow_probed)
        if (self.flush_scales is None) != (self.flush_shares is None):
            raise ValueError("flush_scales and flush_shares must be given together or not at all")
        if self.flush_scales is not None:
            self.flush_scales = np.asarray(self.flush_scales, dtype=np.float64)
            self.flush_shares = np.asarray(self.flush_shares, dtype=np.float64)
            shape = self.flush_scales.shape
            if len(shape) != 2 or shape[0] != steps or self.flush_shares.shape != shape:
                raise ValueError(
                    f"flush_scales and flush_shares must both have shape ({steps}, K), got "
                    f"{shape} and {self.flush_shares.shape}"
                )
            scales = self.flush_scales[~np.isnan(self.flush_scales)]
            if not ((scales > 0) & (scales < np.inf)).all():
                raise ValueError(
                    "flush_scales must hold finite scales > 0 (NaN: not measured), got "
                    f"{scales[~((scales > 0) & (scales < np.inf))][0]!r}"
                )
            shares = self.flush_shares[~np.isnan(self.flush_shares)]
            if ((shares < 0) | (shares > 1)).any():
                raise ValueError("flush_shares must hold shares in [0, 1] (NaN: not measured)")

        self._check_forward()

    def _check_forward(self) -> None:
        if (self.forward_peak is None) != (self.forward_where is None):
            raise ValueError("forward_peak and forward_where must be given together or not at all")
        if self.forward_peak is None:
            return
        self.forward_peak = np.asarray(self.forward_peak, dtype=np.float64)
        if isinstance(self.forward_where, str):
            raise TypeError(f"forward_where must be a sequence of str, got {self.forward_where!r}")
        self.forward_where = tuple(str(w) for w in self.forward_where)
        shape = (self.steps,)
        if self.forward_peak.shape != shape or len(self.forward_where) != self.steps:
            raise ValueError(
                f"forward_peak and forward_where must both have {self.steps} entries, got "
                f"{self.forward_peak.shape} and {len(self.forward_where)}"
            )
        if (self.forward_peak < 0).any():
            raise ValueError("forward_peak must hold numbers >= 0 (NaN: not measured)")

    @property
    def has_forward(self) -> bool:
        """Whether the trace holds the forward pass's measured headroom."""
        return self.forward_peak is not None

    @property
    def has_flush(self) -> bool:
        """Whether the trace holds measured flushed shares."""
        return self.flush_scales is not None

    def _check_layers(self) -> None:
        names = self.layer_names
        if isinstance(names, str) or not all(isinstance(n, str) for n in names):
            raise TypeError(f"layer_names must be a sequence of str, got {names!r}")
        names = tuple(names)
        for name in names:
            check_label("layer_names", name)
        if len(set(names)) != len(names):
            raise ValueError(f"layer_names must be distinct, got {names!r}")
        self.layer_names = names
        self.layer_counts = np.asarray(self.layer_counts, dtype=np.int64)
        self.layer_zeros = np.asarray(self.layer_zeros, dtype=np.int64)
        self.layer_absmax = np.asarray(self.layer_absmax, dtype=np.float64)
        steps, layers = self.steps, len(names)
        for name, want in (
            ("layer_counts", (steps, layers, NBINS)),
            ("layer_zeros", (steps, layers)),
            ("layer_absmax", (steps, layers)),
        ):
            if getattr(self, name).shape != want:
                raise ValueError(f"{name} must have shape {want}, got {getattr(self, name).shape}")
        check_counts("layer_counts", self.layer_counts, self.layer_zeros)
        check_counts("layer_zeros", self.layer_zeros)
        check_magnitudes("layer_absmax", self.layer_absmax)
        same = (self.layer_counts.sum(axis=1) == self.counts).all(axis=1)
        same &= self.layer_zeros.sum(axis=1) == self.zeros
        if not same.all():
            raise ValueError(
                "layer_counts and layer_zeros summed over the layers must equal counts and "
                f"zeros at every step; step {np.flatnonzero(~same)[0]} differs"
            )

    def __repr__(self) -> str:
        """One line: the name, the steps and what the trace holds besides the histograms."""
        parts = [f"name={self.name!r}", f"steps={self.steps}"]
        parts.append(f"nonfinite_steps={int(self.nonfinite.sum())}")
        if self.overflow_scale is not None:
            parts.append(f"overflow_scale={'probed' if self.overflow_probed else 'seen'}")
        if self.has_layers:
            parts.append(f"layers={len(self.layer_names)}")
        if self.has_flush:
            parts.append(f"flush_scales={self.flush_scales.shape[1]}")
        return f"Trace({', '.join(parts)})"

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
        return self.layer_names is not None

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
        return write_file(path, self.write_to, overwrite)

    def write_to(self, f: BinaryIO) -> None:
        """Write the trace's ``.npz`` archive into the open binary file ``f``."""
        write_npz(f, trace_arrays(self), compress=True)

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
        return read_trace(cls, path, max_bytes)
