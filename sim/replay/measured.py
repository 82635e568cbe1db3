"""Measured real runs: the per-step record of a real training run (:class:`MeasuredRun`), its
file format, and the policies whose real runs check the simulator's predictions.

:mod:`sim.nnabla_studies.real_runs` makes these runs; this module only reads and summarizes them
(NumPy only), for :mod:`sim.replay.predictions` and the report.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Union

import numpy as np

from sim.replay.metrics import run_metrics
from sim.replay.result import safe_scales
from sim.traces.real import CHECK_ORDERS, RECORDINGS, recording_stem
from updater.common.float16 import FP16_OVERFLOW
from updater.common.npz import read_npz, write_npz
from updater.common.writing import write_file
from updater.policy import DynamicScale, policy_from_dict
from updater.policy.presets import PRESETS

RECORDED = "recorded"
"""The label of the recording run (``DynamicScale()``, with the recorder) among measured runs."""
CHECKED_POLICIES = {
    "nnabla-legacy": PRESETS["nnabla-legacy"],
    "dynamic-fast": DynamicScale(growth_interval=50),
    "headroom": PRESETS["headroom"],
}
"""The policies whose real runs check the simulator's predictions: the old updater's low start
(8, doubling every 2000 steps: underflow), DynamicScale growing every 50 steps (overflows) and
HeadroomScale (resting near the overflow thresholds)."""

OVERFLOW_PRONE_SCALE = 2.0**15
"""The scale at which a run's overflow-prone steps are counted (``overflow_prone``): the highest
the probes reach (a float16 seed's largest power of two, the default ``max_scale``)."""


@dataclass
class MeasuredRun:
    """Per-step measurements of one real run.

    Attributes:
        model (str): the model's name (:data:`sim.traces.real.MODELS`).
        label (str): the policy's label.
        policy: the policy.
        scale (float64 array (steps,)): the loss scale used (the seed: rounded to float16).
        applied (bool array (steps,)): the update was applied.
        loss_finite (bool array (steps,)): the float16 loss was finite.
        absmax (float64 array (steps,)): the largest true (float32) |gradient|.
        flushed (float64 array (steps,)): share of the true nonzero gradient values that were
            zero in float16 (0 on skipped steps).
        flushed_small (float64 array (steps,)): the part of ``flushed`` whose true value times
            the scale is below 2**-24, float16's smallest subnormal (what the simulator's flush
            model counts); the rest was zeroed by float16 arithmetic on the way (e.g. a ReLU
            whose float16 input is not positive).
        loss (float64 array (steps,)): the float16 training loss of each step.
        accuracy (float): test accuracy at the end.
        seconds (float): training time (shadow passes included).
        about (str): the data and the model, in words.
        overflow_scale, finite_scale (float64 arrays (steps,) or None, the default): the run's
            own per-step overflow thresholds and the largest scales seen finite, probed as a
            recording's are (``Probes(overflow=True)``; inf / 0: none); None
            for a run that did not probe them.
        order (int, default 0): the batch order of the run
            (:func:`sim.nnabla_studies.models.half_model`).
    """

    model: str
    label: str
    policy: Any
    scale: np.ndarray
    applied: np.ndarray
    loss_finite: np.ndarray
    absmax: np.ndarray
    flushed: np.ndarray
    flushed_small: np.ndarray
    loss: np.ndarray
    accuracy: float
    seconds: float
    about: str = ""
    overflow_scale: np.ndarray | None = None
    finite_scale: np.ndarray | None = None
    order: int = 0

    @property
    def stick(self) -> str:
        """What the measured safe scale knows of overflows (:meth:`metrics`): ``"probed"`` (the
        run's own probed thresholds) or ``"seen"`` (only the steps the run saw overflow)."""
        return "seen" if self.overflow_scale is None else "probed"

    @property
    def steps(self) -> int:
        """Number of steps."""
        return int(self.scale.shape[0])

    def summary(self) -> Dict[str, Any]:
        """A table row: model, policy, batch order, steps, skipped, final scale, final loss (mean
        over the applied steps among the last tenth), accuracy, seconds, the mean over applied
        steps of ``flushed`` and ``flushed_small``, ``overflows`` (skipped steps with a finite
        loss), ``overflows_inside`` (those whose true largest |gradient| times the scale stayed
        below 65520: the overflow happened inside the backward pass) and ``below_max_scale``
        (share of steps below the policy's ``max_scale``; NaN without one), ``stick`` and
        ``overflow_prone`` (steps whose probed threshold is at most
        :data:`OVERFLOW_PRONE_SCALE`; NaN for a run that did not probe)."""
        overflow = ~self.applied & self.loss_finite
        cap = getattr(self.policy, "max_scale", None)
        return {
            "model": self.model,
            "policy": self.label,
            "order": self.order,
            "steps": self.steps,
            "skipped": int((~self.applied).sum()),
            "final_scale": float(self.scale[-1]),
            "final_loss": float(np.mean(self.loss[self.applied][-max(1, self.steps // 10) :])),
            "accuracy": self.accuracy,
            "seconds": self.seconds,
            "flushed": self.metrics()["mean_flushed"],
            "flushed_small": self.metrics(self.flushed_small)["mean_flushed"],
            "overflows": int(overflow.sum()),
            "overflows_inside": int((overflow & (self.absmax * self.scale < FP16_OVERFLOW)).sum()),
            "below_max_scale": float(np.mean(self.scale < cap)) if cap else math.nan,
            "stick": self.stick,
            "overflow_prone": (
                math.nan
                if self.overflow_scale is None
                else int((self.overflow_scale <= OVERFLOW_PRONE_SCALE).sum())
            ),
        }

    def metrics(self, flushed: np.ndarray | None = None) -> Dict[str, float]:
        """The simulator's per-run metrics (:func:`sim.replay.metrics.run_metrics`) of this run.

        The safe scale of a step follows :func:`sim.replay.result.safe_scales`: from the true
        largest |gradient|, capped at the policy's ``max_scale``, and below the step's probed
        overflow threshold (at least its probed finite scale) when the run probed them
        (:attr:`stick` ``"probed"``), else below the scale of a step that overflowed (``"seen"``:
        blind to the overflows born inside the backward pass at scales the run did not use).
        ``flushed`` (default :attr:`flushed`) is the per-step flushed share used.
        """
        flushed = self.flushed if flushed is None else flushed
        skipped = ~self.applied
        overflow = skipped & self.loss_finite
        cap = getattr(self.policy, "max_scale", None)
        if self.stick == "probed":
            safe = safe_scales(self.absmax, self.overflow_scale, cap, self.finite_scale)
        else:
            safe = safe_scales(self.absmax, np.where(overflow, self.scale, np.inf), cap)
        columns = [a[:, None] for a in (self.scale, overflow, skipped, safe, flushed)]
        m = run_metrics(*columns, ~self.loss_finite)
        return {k: float(v[0]) for k, v in m.items()}

    def save(self, path: Union[str, Path], overwrite: bool = False) -> Path:
        """Write the run to ``path`` (.npz) with :func:`updater.common.writing.write_file`;
        return the path."""
        arrays = {
            "model": self.model,
            "label": self.label,
            "policy": json.dumps(self.policy.state_dict()),
            **{name: getattr(self, name) for name in _PER_STEP},
            "accuracy": self.accuracy,
            "seconds": self.seconds,
            "about": self.about,
            "order": self.order,
        }
        if self.stick == "probed":
            arrays.update(overflow_scale=self.overflow_scale, finite_scale=self.finite_scale)
        return write_file(
            path,
            lambda f: write_npz(f, arrays, "measured run", compress=True),
            overwrite,
            kind="measured run",
        )

    @classmethod
    def load(cls, path: Union[str, Path]) -> MeasuredRun:
        """Read a run written by :meth:`save`.

        Raises:
            OSError: the file is missing, a folder or unreadable.
            ValueError: the file is not a measured run (empty, truncated, not an ``.npz``,
                arrays missing, of the wrong kind or of different lengths, a policy that does
                not load); the message names the file and the problem.
        """
        z = read_npz(path, "measured run")
        z.require(*_TEXT, "policy", *_PER_STEP, "accuracy", "seconds", hint=": not a measured run")
        per_step = {n: z.array(n, "bool" if n in _FLAGS else "number") for n in _PER_STEP}
        lengths = {n: a.shape for n, a in per_step.items()}
        if len(set(lengths.values())) != 1 or per_step["scale"].ndim != 1:
            raise z.error(f"the per-step arrays must be 1-d of one length, got shapes {lengths}")
        try:
            policy = policy_from_dict(z.json("policy"))
        except (KeyError, TypeError, ValueError) as e:
            raise z.error(f"array 'policy' does not describe a policy ({e})") from None
        probed = {n: z.array(n, "number").astype(np.float64) for n in _PROBED if n in z}
        if probed and (
            len(probed) == 1 or any(a.shape != lengths["scale"] for a in probed.values())
        ):
            raise z.error(f"{' and '.join(_PROBED)} must both be there, of the steps' length")
        return cls(
            **{n: z.scalar(n, "text") for n in _TEXT},
            policy=policy,
            **{n: a.astype(bool if n in _FLAGS else np.float64) for n, a in per_step.items()},
            accuracy=float(z.scalar("accuracy", "number")),
            seconds=float(z.scalar("seconds", "number")),
            **probed,
            order=_order(z),
        )


def _order(z) -> int:
    """The run's batch order (0 in files written before runs had one)."""
    order = int(z.scalar("order", "int")) if "order" in z else 0
    if order < 0:
        raise z.error(f"array 'order' must be a batch order >= 0, got {order}")
    return order


_TEXT = ("model", "label", "about")
_PER_STEP = ("scale", "applied", "loss_finite", "absmax", "flushed", "flushed_small", "loss")
_FLAGS = ("applied", "loss_finite")
_PROBED = ("overflow_scale", "finite_scale")


def run_path(out_dir: Union[str, Path], model: str, label: str, order: int = 0) -> Path:
    """Where the measured run of ``model`` under policy ``label`` in batch order ``order`` is
    kept."""
    return Path(out_dir) / f"{recording_stem(model, order)}.{label}.run.npz"


def measured_paths(out_dir: Union[str, Path], model: str) -> List[Path]:
    """Every measured run of ``model`` in ``out_dir``: each recording's own run
    (:data:`RECORDED`, batch orders :data:`sim.traces.real.RECORDINGS`), then the checked
    policies' (:data:`CHECKED_POLICIES`, batch orders :data:`sim.traces.real.CHECK_ORDERS`)."""
    return [run_path(out_dir, model, RECORDED, k) for k in RECORDINGS] + [
        run_path(out_dir, model, label, k) for k in CHECK_ORDERS for label in CHECKED_POLICIES
    ]
