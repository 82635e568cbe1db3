"""What one recorded step measured (NumPy only): the one value a
:class:`updater.trace.recorder.GradientRecorder` takes per step (:class:`MeasuredStep`), from the
updater's recording hook (:mod:`updater.driver.recording`) or from
:meth:`~updater.trace.recorder.GradientRecorder.record`. Each group of the trace
(:data:`updater.trace.format.GROUPS`) turns it into its part of the step's row."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..common.validation import check_number, check_positive


@dataclass(frozen=True, kw_only=True)
class MeasuredStep:
    """One recorded step, built by keyword and checked.

    Attributes:
        step (int): the ``update()`` call number (0-based).
        grads (sequence of arrays): the recorded attempt's gradients as scaled by ``scale``
            (float16 or float32; may hold inf/NaN).
        scale (float): the loss scale of the recorded attempt, finite > 0.
        bad_batch (bool, default False): the step was a bad batch (an inf/NaN loss or input:
            bad data, skipped at every scale, whatever its gradients).
        overflow_scale (float, default inf): the smallest scale at which another attempt of the
            step overflowed with a finite loss, > 0 (inf: none).
        finite_scale (float, default 0.0): the largest scale at which the step was seen finite
            (by probes), >= 0 (0: not known).
        names (sequence of str or None, default None): the parameter names of ``grads``.
        overflow_probed (bool, default False): probes measured ``overflow_scale``.
        probe_passes (int, default 0): forward/backward rounds the probes of this step ran.
        measured (mapping, default {}): what other probes measured, by the ``KEY`` of the
            trace's group that holds it (``"flush"``: ``(scales, shares)``; ``"forward"``:
            ``(peak, where)``).
    """

    step: int
    grads: Sequence
    scale: float
    bad_batch: bool = False
    overflow_scale: float = math.inf
    finite_scale: float = 0.0
    names: Sequence[str] | None = None
    overflow_probed: bool = False
    probe_passes: int = 0
    measured: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "scale", check_positive("scale", self.scale))
        over = self.overflow_scale
        ok = isinstance(over, (int, float, np.integer, np.floating))
        if not ok or isinstance(over, bool) or not over > 0:
            raise ValueError(f"overflow_scale must be a number > 0 or None, got {over!r}")
        object.__setattr__(self, "overflow_scale", float(over))
        finite = check_number("finite_scale", self.finite_scale, 0.0, math.inf)
        object.__setattr__(self, "finite_scale", finite)
        object.__setattr__(self, "grads", list(self.grads))
