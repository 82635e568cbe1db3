"""Record per-step gradient histograms during training, as a trace the simulator replays."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import List, Union

import numpy as np

from sim.traces import Trace, binade_histogram

from .policy import check_int_at_least

logger = logging.getLogger(__name__)


class GradientRecorder:
    """Record per-step gradient-magnitude histograms to a :class:`sim.traces.Trace` ``.npz``.

    Each recorded step stores :func:`sim.traces.binade_histogram` of the *unscaled* gradients:
    the float16 (or float32) values the backward pass produced at the scale used, divided by that
    scale in float64 (so values flushed to zero in float16 stay zero, and the histogram shows what
    the model's gradients were after float16 rounding). ``nonfinite`` marks steps whose gradients
    held inf/NaN at the scale used (an overflow or a bad batch). The trace is written on
    :meth:`close` or on leaving a ``with`` block.

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

    def record(self, step: int, grads: List[np.ndarray], scale: float) -> None:
        """Add one step: ``grads`` are the gradient arrays as scaled by ``scale``."""
        values = np.concatenate([np.asarray(g, dtype=np.float64).ravel() for g in grads])
        values /= float(scale)
        self._rows.append(binade_histogram(values))
        self.steps.append(int(step))

    def trace(self) -> Trace:
        """Return the steps recorded so far as a :class:`sim.traces.Trace`."""
        if not self._rows:
            raise ValueError("no steps recorded yet; call update() before building a trace")
        counts, zeros, absmax, finite = zip(*self._rows)
        return Trace(np.stack(counts), zeros, absmax, ~np.asarray(finite), name=self.name)

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
