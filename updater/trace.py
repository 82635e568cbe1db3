"""The gradient-trace format: the contract between training and simulation (NumPy only).

A trace holds, for each training step, a histogram of nonzero finite gradient magnitudes by
binade (bin ``i`` counts values ``v`` with ``floor(log2|v|) == EXP_MIN + i``; values outside the
range land in the end bins), the count of exact zeros, the largest magnitude (unscaled),
whether the step is non-finite whatever the scale (a bad batch: the loss itself was inf/NaN), and
the smallest loss scale at which the step was seen to overflow (``overflow_scale``, inf when it
never was). :class:`GradientRecorder` writes it from a training run; the simulator
(:mod:`sim.traces.families` makes synthetic ones, :mod:`sim.replay.run` replays them) reads it.
Optionally
(``GradientRecorder(per_parameter=True)``) a trace also holds the same statistics for each
parameter array ("layers": ``fc1/affine/W`` and ``fc1/affine/b`` are two), which
:mod:`sim.replay.layers` analyses.

Overflow versus bad batch. A bad batch (``nonfinite``) is skipped at every scale. An overflow is
a property of a scale: a step recorded as overflowing at scale ``s_o`` (finite loss, inf/NaN
gradients) overflows at every scale ``>= s_o`` and replays as a normal step below it, unless its
``absmax`` says otherwise (see :mod:`sim.replay.run`). The threshold is stored, not derived from
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

from .checks import check_bool, check_int, check_positive
from .files import atomic_write
from .float16 import FP16_OVERFLOW

logger = logging.getLogger(__name__)

EXP_MIN = -80
"""Binade of the first histogram bin (values below 2**EXP_MIN are counted there)."""
EXP_MAX = 40
"""Binade of the last histogram bin (values at or above 2**EXP_MAX are counted there)."""
NBINS = EXP_MAX - EXP_MIN + 1
FORMAT_VERSION = 4
"""Trace file format: 2 added ``overflow_scale`` (version-1 files load with it all inf); 3 added
the optional per-layer arrays (version-1 and -2 files load without layers); 4 added
``overflow_probed`` and the optional measured flush curve (older files load without them)."""
_LAYER_FIELDS = ("layer_names", "layer_counts", "layer_zeros", "layer_absmax")


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
        given = [getattr(self, name) is not None for name in _LAYER_FIELDS]
        if any(given) and not all(given):
            raise ValueError(
                f"{', '.join(_LAYER_FIELDS)} must be given together or not at all; got only "
                f"{', '.join(n for n, g in zip(_LAYER_FIELDS, given) if g)}"
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
            shares = self.flush_shares[~np.isnan(self.flush_shares)]
            if ((shares < 0) | (shares > 1)).any():
                raise ValueError("flush_shares must hold shares in [0, 1] (NaN: not measured)")

    @property
    def has_flush(self) -> bool:
        """Whether the trace holds measured flushed shares."""
        return self.flush_scales is not None

    def _check_layers(self) -> None:
        names = self.layer_names
        if isinstance(names, str) or not all(isinstance(n, str) for n in names):
            raise TypeError(f"layer_names must be a sequence of str, got {names!r}")
        names = tuple(names)
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
        same = (self.layer_counts.sum(axis=1) == self.counts).all(axis=1)
        same &= self.layer_zeros.sum(axis=1) == self.zeros
        if not same.all():
            raise ValueError(
                "layer_counts and layer_zeros summed over the layers must equal counts and "
                f"zeros at every step; step {np.flatnonzero(~same)[0]} differs"
            )

    @property
    def steps(self) -> int:
        """Number of steps."""
        return int(self.counts.shape[0])

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
            "overflow_probed": self.overflow_probed,
            "name": self.name,
        }
        if self.has_flush:
            arrays.update(flush_scales=self.flush_scales, flush_shares=self.flush_shares)
        if self.has_layers:
            arrays["layer_names"] = np.array(self.layer_names, dtype=str)
            arrays.update({name: getattr(self, name) for name in _LAYER_FIELDS[1:]})
        return atomic_write(path, lambda f: np.savez_compressed(f, **arrays))

    @classmethod
    def load(cls, path: Union[str, Path]) -> Trace:
        """Read a trace written by :meth:`save` (or by the updater's gradient recorder).

        Files of format version 1 (no ``overflow_scale``) load with ``overflow_scale`` all inf:
        their recorded overflows were stored as ``nonfinite`` and stay bad batches. Files of
        versions 1 and 2 load without layers, files before version 4 without probes or flush
        measurements.
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
            layers = {n: z[n] for n in _LAYER_FIELDS if n in z}
            if "layer_names" in layers:
                layers["layer_names"] = tuple(str(n) for n in layers["layer_names"])
            extra = {n: z[n] for n in ("flush_scales", "flush_shares") if n in z}
            probed = bool(z["overflow_probed"]) if "overflow_probed" in z else False
            return cls(
                z["counts"], z["zeros"], z["absmax"], z["nonfinite"], name, over, **layers,
                overflow_probed=probed, **extra,
            )  # fmt: skip


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

    Per-parameter histograms (``per_parameter=True``, off by default) keep the same statistics
    for each gradient array too (the trace's ``layer_*`` fields), named by ``record(names=...)``.
    They cost ``parameter arrays x NBINS x 8`` bytes (968 bytes per array) per recorded step,
    held in memory while the recorder lives (the file is compressed). On an overflowed step the
    arrays holding inf/NaN get the same ``absmax`` bound as the whole step (``65520 / s``, if
    larger than their finite values); the others keep their measured largest value.

    Overflow probes (``probe_overflow=True``, off by default): on each recorded step the updater
    runs the step's forward and backward again on the same batch at other powers of two of the
    scale and records the smallest at which the real backward pass overflows, within the
    policy's bounds (:mod:`updater.probes`), so the simulator sees overflows born inside the
    backward kernels, which no stored gradient shows; for a step that overflowed, the first
    finite probe's gradients are recorded instead. Training is left exactly as without probing.
    Cost: the extra forward/backward rounds, counted in :attr:`probe_passes`.

    Measured flushing (``measure_flush=True``, off by default): on each recorded step the
    updater also runs the step in float32 once (a copy of the graph, same parameters) and in
    float16 at ``seed * 2**k`` for ``k`` in ``updater.probes.FLUSH_OFFSETS``, and stores the
    share of the true nonzero gradient values that float16 left at zero at each scale (the
    trace's ``flush_*`` fields), which the simulator replays instead of its binade model.

    Args:
        path (str or Path): output ``.npz`` path.
        every (int, default 1): record every ``every``-th ``update()`` call (>= 1).
        name (str or None, default None): trace name; the file stem when None.
        per_parameter (bool, default False): also keep one histogram per gradient array.
        probe_overflow (bool, default False): probe each recorded step's overflow threshold.
        measure_flush (bool, default False): measure each recorded step's flushed share at
            several scales against a float32 copy of the graph (:mod:`updater.probes`).

    Attributes:
        probe_passes (int): forward/backward rounds the probes ran so far.
    """

    def __init__(
        self,
        path: Union[str, Path],
        every: int = 1,
        name: str | None = None,
        per_parameter: bool = False,
        probe_overflow: bool = False,
        measure_flush: bool = False,
    ):
        self.every = check_int("every", every, 1)
        self.probe_overflow = check_bool("probe_overflow", probe_overflow)
        self.measure_flush = check_bool("measure_flush", measure_flush)
        self.probe_passes = 0
        self.path = Path(path)
        self.name = name if name is not None else self.path.stem
        self.per_parameter = check_bool("per_parameter", per_parameter)
        self._rows: List[tuple] = []
        self._layer_names: List[str] | None = [] if self.per_parameter else None
        self.steps: List[int] = []
        self._written = [0]  # rows in the file; shared with the exit hook, which holds no self
        self._exit_hook = weakref.finalize(
            self,
            _write_at_exit,
            self._rows,
            self._written,
            self.path,
            self.name,
            self._layer_names,
            self.probe_overflow,
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
        names: List[str] | None = None,
        flush: tuple | None = None,
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
            names (list of str or None, default None): the parameter names of ``grads``, in the
                same order; required with ``per_parameter=True``, ignored otherwise. They are
                matched by name from step to step: a name first seen at a later step (a
                parameter added during training) gets zero counts and zeros at the steps before,
                and a name missing from a step gets zero counts and zeros at that step.
            flush (tuple or None, default None): ``(scales, shares)``, the measured flushed
                shares of this step (NaN: not measured); None: not measured.

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
        grads = list(grads)
        columns = self._columns(names, len(grads)) if self.per_parameter else None
        rows = [binade_histogram(np.asarray(g, dtype=np.float64) / scale) for g in grads]
        layer_counts = np.array([r[0] for r in rows], np.int64).reshape(-1, NBINS)
        layer_zeros = np.array([r[1] for r in rows], np.int64)
        layer_absmax = np.array([r[2] for r in rows], np.float64)
        layer_finite = np.array([r[3] for r in rows], bool)
        grads_finite = bool(layer_finite.all())
        bad = loss_finite is not None and not loss_finite and not grads_finite
        if not grads_finite and not bad:  # overflowed at this scale
            over = min(over, scale)
            bound = FP16_OVERFLOW / scale
            layer_absmax[~layer_finite] = np.maximum(layer_absmax[~layer_finite], bound)
        counts, zeros = layer_counts.sum(axis=0), int(layer_zeros.sum())
        absmax = float(layer_absmax.max(initial=0.0))
        layers = None if columns is None else (columns, layer_counts, layer_zeros, layer_absmax)
        if flush is not None:
            flush = tuple(np.asarray(a, dtype=np.float64) for a in flush)
        self._rows.append((counts, zeros, absmax, bad, over, layers, flush))
        self.steps.append(int(step))

    def _columns(self, names, n: int) -> np.ndarray:
        """The trace columns of ``names`` (checked), adding names not seen before."""
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
        known = set(self._layer_names)
        self._layer_names.extend(x for x in names if x not in known)
        column = {x: i for i, x in enumerate(self._layer_names)}
        return np.array([column[x] for x in names], np.int64)

    def trace(self) -> Trace:
        """Return the steps recorded so far as a :class:`Trace`."""
        return _trace_of(self._rows, self.name, self._layer_names, self.probe_overflow)

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


def _trace_of(
    rows: List[tuple], name: str, layer_names: List[str] | None, probed: bool = False
) -> Trace:
    if not rows:
        raise ValueError("no steps recorded yet; call update() before building a trace")
    counts, zeros, absmax, bad, over, layers, flush = zip(*rows)
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
    return Trace(
        np.stack(counts), zeros, absmax, bad, name, over, overflow_probed=probed, **per_layer
    )


def _write_at_exit(
    rows: List[tuple],
    written: List[int],
    path: Path,
    name: str,
    layer_names: List[str] | None,
    probed: bool,
) -> None:
    """A recorder's exit hook: write the steps recorded since its last write, if any."""
    if len(rows) > written[0]:
        _trace_of(rows, name, layer_names, probed).save(path)
        logger.info("GradientRecorder wrote %d steps to %s at exit", len(rows), path)
