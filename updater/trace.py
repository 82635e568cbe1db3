"""The gradient-trace format: the contract between training and simulation (NumPy only).

A trace holds, for each training step, a histogram of nonzero finite gradient magnitudes by
binade (bin ``i`` counts values ``v`` with ``floor(log2|v|) == EXP_MIN + i``; values outside the
range land in the end bins), the count of exact zeros, the largest magnitude (unscaled),
whether the step is non-finite whatever the scale (a bad batch: the loss itself was inf/NaN), and
the smallest loss scale at which the step was seen to overflow (``overflow_scale``, inf when it
never was). :class:`GradientRecorder` writes it from a training run; the simulator
(:mod:`sim.traces` makes synthetic ones, :mod:`sim.run` replays them) reads it.

Overflow versus bad batch. A bad batch (``nonfinite``) is skipped at every scale. An overflow is
a property of a scale: a step recorded as overflowing at scale ``s_o`` (finite loss, inf/NaN
gradients) overflows at every scale ``>= s_o`` and replays as a normal step below it, unless its
``absmax`` says otherwise (see :mod:`sim.run`). The threshold is stored, not derived from
``absmax``, because the overflow can happen in intermediate backward values that no parameter
gradient shows. Synthetic families record no overflow (``overflow_scale`` all inf): their
overflows follow from ``absmax`` alone.
"""

from __future__ import annotations

import logging
import math
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import List, Union

import numpy as np

from .checks import check_int, check_positive
from .files import atomic_write
from .float16 import FP16_OVERFLOW

logger = logging.getLogger(__name__)

EXP_MIN = -80
"""Binade of the first histogram bin (values below 2**EXP_MIN are counted there)."""
EXP_MAX = 40
"""Binade of the last histogram bin (values at or above 2**EXP_MAX are counted there)."""
NBINS = EXP_MAX - EXP_MIN + 1
FORMAT_VERSION = 2
"""Trace file format: 2 added ``overflow_scale`` (version-1 files load with it all inf)."""


def binade_histogram(values) -> tuple:
    """Histogram one step's gradient values by binade.

    Args:
        values (array-like of float): gradient values (any float dtype, any shape).

    Returns:
        ``(counts, zeros, absmax, finite)``: int64 counts of length :data:`NBINS` over nonzero
        finite magnitudes, the number of exact zeros, the largest finite magnitude (0.0 if none)
        and whether every value was finite.

    >>> counts, zeros, absmax, finite = binade_histogram([0.0, 0.75, -3.0, 1e-30])
    >>> int(counts[-1 - EXP_MIN]), int(counts[1 - EXP_MIN]), zeros, absmax, finite
    (1, 1, 1, 3.0, True)
    """
    a = np.abs(np.asarray(values, dtype=np.float64).ravel())
    fin = np.isfinite(a)
    all_finite = bool(fin.all())
    if not all_finite:
        a = a[fin]
    nonzero = a[a > 0]
    _, exp = np.frexp(nonzero)
    binade = np.clip(exp.astype(np.int64) - 1, EXP_MIN, EXP_MAX) - EXP_MIN
    counts = np.bincount(binade, minlength=NBINS).astype(np.int64)
    absmax = float(nonzero.max()) if nonzero.size else 0.0
    return counts, int(a.size - nonzero.size), absmax, all_finite


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
    """

    counts: np.ndarray
    zeros: np.ndarray
    absmax: np.ndarray
    nonfinite: np.ndarray
    name: str = "trace"
    overflow_scale: np.ndarray | None = None

    def __post_init__(self):
        self.counts = np.asarray(self.counts, dtype=np.int64)
        self.zeros = np.asarray(self.zeros, dtype=np.int64)
        self.absmax = np.asarray(self.absmax, dtype=np.float64)
        self.nonfinite = np.asarray(self.nonfinite, dtype=bool)
        steps = self.counts.shape[0]
        if self.counts.ndim != 2 or self.counts.shape[1] != NBINS:
            raise ValueError(f"counts must have shape (steps, {NBINS}), got {self.counts.shape}")
        if self.overflow_scale is None:
            self.overflow_scale = np.full(steps, np.inf)
        self.overflow_scale = np.array(self.overflow_scale, dtype=np.float64)
        for name in ("zeros", "absmax", "nonfinite", "overflow_scale"):
            shape = getattr(self, name).shape
            if shape != (steps,):
                raise ValueError(f"{name} must have shape ({steps},), got {shape}")
        if not (self.overflow_scale > 0).all():  # also catches NaN
            bad = self.overflow_scale[~(self.overflow_scale > 0)][0]
            raise ValueError(
                f"overflow_scale must hold numbers > 0 (inf where the step never overflowed), "
                f"got {bad!r}"
            )

    @property
    def steps(self) -> int:
        """Number of steps."""
        return int(self.counts.shape[0])

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

    def save(self, path: Union[str, Path]) -> Path:
        """Write the trace to ``path`` (.npz) atomically; return the path."""
        arrays = {
            "format_version": FORMAT_VERSION,
            "exp_min": EXP_MIN,
            "exp_max": EXP_MAX,
            "counts": self.counts,
            "zeros": self.zeros,
            "absmax": self.absmax,
            "nonfinite": self.nonfinite,
            "overflow_scale": self.overflow_scale,
            "name": self.name,
        }
        return atomic_write(path, lambda f: np.savez_compressed(f, **arrays))

    @classmethod
    def load(cls, path: Union[str, Path]) -> Trace:
        """Read a trace written by :meth:`save` (or by the updater's gradient recorder).

        Files of format version 1 (no ``overflow_scale``) load with ``overflow_scale`` all inf:
        their recorded overflows were stored as ``nonfinite`` and stay bad batches.
        """
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("counts", "zeros", "absmax", "nonfinite") if k not in z]
            if missing:
                raise ValueError(f"{path} is not a gradient trace: missing arrays {missing}")
            version = int(z["format_version"]) if "format_version" in z else 1
            if version > FORMAT_VERSION:
                raise ValueError(
                    f"{path} has trace format_version {version}; this version reads up to "
                    f"{FORMAT_VERSION} (upgrade the package)"
                )
            if int(z["exp_min"]) != EXP_MIN or int(z["exp_max"]) != EXP_MAX:
                raise ValueError(
                    f"{path} uses binades [{int(z['exp_min'])}, {int(z['exp_max'])}], "
                    f"this version reads [{EXP_MIN}, {EXP_MAX}]"
                )
            name = str(z["name"]) if "name" in z else Path(path).stem
            over = z["overflow_scale"] if "overflow_scale" in z else None
            return cls(z["counts"], z["zeros"], z["absmax"], z["nonfinite"], name, over)


class GradientRecorder:
    """Record per-step gradient-magnitude histograms to a :class:`Trace` ``.npz``.

    Each recorded step stores :func:`binade_histogram` of the *unscaled* gradients:
    the float16 (or float32) values the backward pass produced at the scale used, divided by that
    scale in float64 (so values flushed to zero in float16 stay zero, and the histogram shows what
    the model's gradients were after float16 rounding). The trace is written on :meth:`close`,
    on leaving a ``with`` block, or at interpreter exit (or when the recorder is garbage
    collected) if steps were recorded since the last write.

    Overflow is told apart from bad data, so that a replay over other scales is right:

    - a step whose **loss** was inf/NaN (``loss_finite=False``) and whose gradients were not all
      finite is a bad batch: ``nonfinite`` True, skipped at every scale;
    - a step whose loss was finite but whose gradients held inf/NaN at the recorded scale ``s``
      overflowed: ``overflow_scale = s`` (or the smaller ``overflow_scale`` passed in), and the
      simulator replays it as an overflow at every scale ``>= overflow_scale`` and as a normal
      step below it.

    Approximations, for a step whose recorded attempt overflowed (the finite values of such an
    attempt are not the step's gradients: inf/NaN propagates backward into upstream gradients):

    - the histogram holds only the attempt's finite values (fewer values than the model has);
    - ``absmax`` is raised to at least ``65520 / s``, the smallest unscaled magnitude that
      overflows at ``s``: a lower bound that a replay at a lower scale passes to policies that
      use the largest gradient (the real largest value may be larger; if the overflow happened
      in an intermediate value, the parameter gradients' largest value may be smaller);
    - below ``overflow_scale`` the step is replayed as finite: the recording cannot tell whether
      it would also have overflowed at a lower scale (it would, if the overflowing values were
      larger than ``65520 / s`` by more than the factor between the scales).

    Non-finite gradients with a finite loss are taken as overflow even when they would be NaN at
    every scale (a NaN made by the backward pass itself): the recording cannot tell the two apart.

    Args:
        path (str or Path): output ``.npz`` path.
        every (int, default 1): record every ``every``-th ``update()`` call (>= 1).
        name (str or None, default None): trace name; the file stem when None.
    """

    def __init__(self, path: Union[str, Path], every: int = 1, name: str | None = None):
        self.every = check_int("every", every, 1)
        self.path = Path(path)
        self.name = name if name is not None else self.path.stem
        self._rows: List[tuple] = []
        self.steps: List[int] = []
        self._written = [0]  # rows in the file; shared with the exit hook, which holds no self
        self._exit_hook = weakref.finalize(
            self, _write_at_exit, self._rows, self._written, self.path, self.name
        )

    def wants(self, step: int) -> bool:
        """Whether ``update()`` call number ``step`` (0-based) should be recorded."""
        return step % self.every == 0

    def record(
        self,
        step: int,
        grads: List[np.ndarray],
        scale: float,
        loss_finite: bool | None = True,
        overflow_scale: float | None = None,
    ) -> None:
        """Add one step.

        Args:
            step (int): the ``update()`` call number (0-based).
            grads (list of arrays): the recorded attempt's gradients as scaled by ``scale``
                (float16 or float32; may hold inf/NaN).
            scale (float, finite > 0): the loss scale of the recorded attempt.
            loss_finite (bool or None, default True): False when the loss itself was inf/NaN
                (bad data: the step is bad at every scale, unless every gradient was finite, in
                which case the update was applied and the step is recorded as a normal one);
                None (not checked) counts as True.
            overflow_scale (float or None, default None): the smallest scale at which another
                attempt of the same step overflowed with a finite loss (an earlier attempt of
                ``on_overflow="retry"``, or this attempt when the caller knows it overflowed
                although ``grads`` look finite, e.g. on another worker); > 0, None (or inf) when
                there was none. Non-finite ``grads`` with a finite loss add ``scale`` to it.

        >>> import tempfile
        >>> rec = GradientRecorder(tempfile.mkdtemp() + "/t.npz")
        >>> rec.record(0, [np.array([1.0, np.inf], np.float16)], 1024.0)  # an overflow
        >>> rec.record(1, [np.array([np.nan, 2.0], np.float16)], 1024.0, loss_finite=False)
        >>> t = rec.trace()
        >>> t.nonfinite.tolist(), t.overflow_scale.tolist(), t.absmax[0] == 65520.0 / 1024
        ([False, True], [1024.0, inf], True)
        """
        scale = check_positive("scale", scale)
        over = math.inf
        if overflow_scale is not None:
            ok = isinstance(overflow_scale, (int, float, np.integer, np.floating))
            if not ok or isinstance(overflow_scale, bool) or not overflow_scale > 0:
                raise ValueError(
                    f"overflow_scale must be a number > 0 or None, got {overflow_scale!r}"
                )
            over = float(overflow_scale)
        values = np.concatenate([np.asarray(g, dtype=np.float64).ravel() for g in grads])
        values /= scale
        counts, zeros, absmax, grads_finite = binade_histogram(values)
        bad = loss_finite is not None and not loss_finite and not grads_finite
        if not grads_finite and not bad:  # overflowed at this scale
            over = min(over, scale)
            absmax = max(absmax, FP16_OVERFLOW / scale)
        self._rows.append((counts, zeros, absmax, bad, over))
        self.steps.append(int(step))

    def trace(self) -> Trace:
        """Return the steps recorded so far as a :class:`Trace`."""
        return _trace_of(self._rows, self.name)

    def close(self) -> Path | None:
        """Write the trace (atomically) and return its path; None when nothing was recorded."""
        if not self._rows:
            logger.warning("GradientRecorder %s recorded no steps; nothing written", self.path)
            return None
        path = self.trace().save(self.path)
        self._written[0] = len(self._rows)
        return path

    def __enter__(self) -> GradientRecorder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _trace_of(rows: List[tuple], name: str) -> Trace:
    if not rows:
        raise ValueError("no steps recorded yet; call update() before building a trace")
    counts, zeros, absmax, bad, over = zip(*rows)
    return Trace(np.stack(counts), zeros, absmax, bad, name, over)


def _write_at_exit(rows: List[tuple], written: List[int], path: Path, name: str) -> None:
    """A recorder's exit hook: write the steps recorded since its last write, if any."""
    if len(rows) > written[0]:
        _trace_of(rows, name).save(path)
        logger.info("GradientRecorder wrote %d steps to %s at exit", len(rows), path)
