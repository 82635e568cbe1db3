"""Record per-step gradient histograms during training, as a trace the simulator replays."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import List, Union

import numpy as np

from sim.traces import FP16_OVERFLOW, Trace, binade_histogram

from .policy import check_int_at_least, check_positive_finite

logger = logging.getLogger(__name__)


class GradientRecorder:
    """Record per-step gradient-magnitude histograms to a :class:`sim.traces.Trace` ``.npz``.

    Each recorded step stores :func:`sim.traces.binade_histogram` of the *unscaled* gradients:
    the float16 (or float32) values the backward pass produced at the scale used, divided by that
    scale in float64 (so values flushed to zero in float16 stay zero, and the histogram shows what
    the model's gradients were after float16 rounding). The trace is written on :meth:`close` or
    on leaving a ``with`` block.

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
        self.every = check_int_at_least("every", every, 1)
        self.path = Path(path)
        self.name = name if name is not None else self.path.stem
        self._rows: List[tuple] = []
        self.steps: List[int] = []

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
        scale = check_positive_finite("scale", scale)
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
        """Return the steps recorded so far as a :class:`sim.traces.Trace`."""
        if not self._rows:
            raise ValueError("no steps recorded yet; call update() before building a trace")
        counts, zeros, absmax, bad, over = zip(*self._rows)
        return Trace(np.stack(counts), zeros, absmax, bad, self.name, over)

    def close(self) -> Path | None:
        """Write the trace (atomically) and return its path; None when nothing was recorded."""
        if not self._rows:
            logger.warning("GradientRecorder %s recorded no steps; nothing written", self.path)
            return None
        return self.trace().save(self.path)

    def __enter__(self) -> GradientRecorder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
