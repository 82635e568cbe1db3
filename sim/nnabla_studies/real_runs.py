"""Real training runs under a chosen policy, measured against a float32 shadow of the model.

This is the other half of the simulator's check (:mod:`sim.replay.predictions`): a model of
:mod:`sim.nnabla_studies.real_traces` trains for real in ``cpu:half`` with the updater under some
policy, and
at every step a float32 copy of its training graph (same parameters, same batch) computes the
true gradients. Per step the run keeps the loss scale used (the float16 seed), whether the update
was applied, whether the loss was finite, the true largest |gradient| and the share of the true
nonzero gradient values that the float16 backward pass at that scale left at exactly zero
(flushed, anywhere on their way through the graph). :meth:`MeasuredRun.metrics` turns these into
the simulator's metrics with the simulator's own rules (:func:`sim.replay.metrics.run_metrics`,
:func:`sim.replay.run.safe_scales`).

The shadow pass reads the parameters in float32; the float16 graph reads them rounded to
float16, so the two see the same weights up to that rounding. Running statistics that the shadow's
forward pass moves (BatchNormalization) are put back after it.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Union

import numpy as np

from sim.replay.metrics import run_metrics
from sim.replay.run import safe_scales
from updater.files import atomic_write
from updater.float16 import FP16_OVERFLOW, FP16_SMALLEST_SUBNORMAL
from updater.policy import DynamicScale, check_policy, policy_from_dict
from updater.presets import PRESETS

RECORDED = "recorded"
"""The label of the recording run (``DynamicScale()``, with the recorder) among measured runs."""
CHECKED_POLICIES = {
    "nnabla-legacy": PRESETS["nnabla-legacy"],
    "dynamic-fast": DynamicScale(growth_interval=50),
}
"""The policies whose real runs check the simulator's predictions: the old updater's low start
(8, doubling every 2000 steps: underflow) and DynamicScale growing every 50 steps (overflows)."""
MEASURED = (RECORDED, *CHECKED_POLICIES)
"""The labels of every measured run of a model."""


@dataclass
class MeasuredRun:
    """Per-step measurements of one real run.

    Attributes:
        model (str): the model's name (:data:`sim.nnabla_studies.real_traces.MODELS`).
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

    @property
    def steps(self) -> int:
        """Number of steps."""
        return int(self.scale.shape[0])

    def summary(self) -> Dict[str, Any]:
        """A table row: model, policy, steps, skipped, final scale, final loss (mean over the
        applied steps among the last tenth), accuracy, seconds, the mean over applied steps of
        ``flushed`` and ``flushed_small``, ``overflows`` (skipped steps with a finite loss),
        ``overflows_inside`` (those whose true largest |gradient| times the scale stayed below
        65520: the overflow happened inside the backward pass) and ``below_max_scale`` (share of
        steps below the policy's ``max_scale``; NaN without one)."""
        overflow = ~self.applied & self.loss_finite
        cap = getattr(self.policy, "max_scale", None)
        return {
            "model": self.model,
            "policy": self.label,
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
        }

    def metrics(self, flushed: np.ndarray | None = None) -> Dict[str, float]:
        """The simulator's per-run metrics (:func:`sim.replay.metrics.run_metrics`) of this run.

        The safe scale of a step follows :func:`sim.replay.run.safe_scales`: from the true largest
        |gradient|, below the scale of a step that overflowed, capped at the policy's
        ``max_scale``. ``flushed`` (default :attr:`flushed`) is the per-step flushed share used.
        """
        flushed = self.flushed if flushed is None else flushed
        skipped = ~self.applied
        overflow = skipped & self.loss_finite
        over_from = np.where(overflow, self.scale, np.inf)
        safe = safe_scales(self.absmax, over_from, getattr(self.policy, "max_scale", None))
        columns = [a[:, None] for a in (self.scale, overflow, skipped, safe, flushed)]
        m = run_metrics(*columns, ~self.loss_finite)
        return {k: float(v[0]) for k, v in m.items()}

    def save(self, path: Union[str, Path]) -> Path:
        """Write the run to ``path`` (.npz) atomically; return the path."""
        arrays = {
            "model": self.model,
            "label": self.label,
            "policy": json.dumps(self.policy.state_dict()),
            "scale": self.scale,
            "applied": self.applied,
            "loss_finite": self.loss_finite,
            "absmax": self.absmax,
            "flushed": self.flushed,
            "flushed_small": self.flushed_small,
            "loss": self.loss,
            "accuracy": self.accuracy,
            "seconds": self.seconds,
            "about": self.about,
        }
        return atomic_write(path, lambda f: np.savez_compressed(f, **arrays))

    @classmethod
    def load(cls, path: Union[str, Path]) -> MeasuredRun:
        """Read a run written by :meth:`save`."""
        with np.load(path, allow_pickle=False) as z:
            return cls(
                model=str(z["model"]),
                label=str(z["label"]),
                policy=policy_from_dict(json.loads(str(z["policy"]))),
                scale=z["scale"].astype(np.float64),
                applied=z["applied"].astype(bool),
                loss_finite=z["loss_finite"].astype(bool),
                absmax=z["absmax"].astype(np.float64),
                flushed=z["flushed"].astype(np.float64),
                flushed_small=z["flushed_small"].astype(np.float64),
                loss=z["loss"].astype(np.float64),
                accuracy=float(z["accuracy"]),
                seconds=float(z["seconds"]),
                about=str(z["about"]),
            )


def run_path(out_dir: Union[str, Path], model: str, label: str) -> Path:
    """Where the measured run of ``model`` under policy ``label`` is kept."""
    return Path(out_dir) / f"{model}.{label}.run.npz"


def _host_copies(params) -> list:
    return [np.array(p.grad.get_data("r"), dtype=np.float64).ravel() for p in params]


def _flushed_shares(true, half, scale: float):
    """Shares of the nonzero ``true`` values that are zero in ``half``: all of them, and those
    whose true value times ``scale`` is below float16's smallest subnormal."""
    nonzero = max(sum(int(np.count_nonzero(g)) for g in true), 1)
    lost = small = 0
    for g, h in zip(true, half):
        zeroed = (g != 0) & (h == 0)
        lost += int(zeroed.sum())
        small += int((zeroed & (np.abs(g) * scale < FP16_SMALLEST_SUBNORMAL)).sum())
    return lost / nonzero, small / nonzero


def measure_run(
    name: str, policy, label: str, steps: int, seed: int = 0, recorder=None
) -> MeasuredRun:
    """Train model ``name`` for ``steps`` steps in ``cpu:half`` under ``policy``, measuring every
    step against the float32 shadow (module doc). Same seed, same weights and batches whatever
    the policy; ``recorder`` (a GradientRecorder or None) is handed to the updater.
    """
    import nnabla as nn

    from sim.nnabla_studies.real_traces import half_model
    from updater import DynamicLossScalingUpdater, get_context
    from updater.arrays import copy_forward_state, restore_array

    check_policy(policy)
    scale = np.empty(steps)
    applied = np.empty(steps, dtype=bool)
    loss_finite = np.empty(steps, dtype=bool)
    absmax = np.empty(steps)
    flushed = np.zeros(steps)
    flushed_small = np.zeros(steps)
    loss = np.empty(steps)
    with half_model(name, seed) as model:
        solver, feed = model["solver"], model["feed"]
        with nn.context_scope(get_context("cpu:float")):
            shadow = model["training_loss"]()
        params = list(solver.get_parameters().values())
        # the batch is fed once per step, before the shadow pass; the updater's forward reads it
        updater = DynamicLossScalingUpdater(
            solver, model["loss"], None, policy=policy, recorder=recorder
        )
        start = time.perf_counter()
        for i in range(steps):
            feed()
            moved = copy_forward_state(shadow)
            solver.zero_grad()
            shadow.forward(clear_no_need_grad=True)
            shadow.backward(clear_buffer=True)
            for var, saved in moved:
                restore_array(var, saved)
            true = _host_copies(params)
            absmax[i] = max(float(np.abs(g).max()) for g in true)
            finite = updater.backward()
            half = _host_copies(params) if finite else None
            record = updater.step()
            scale[i] = record.scale
            applied[i] = record.update_applied
            if half is not None:
                flushed[i], flushed_small[i] = _flushed_shares(true, half, record.scale)
            loss_finite[i] = record.loss_finite is not False
            loss[i] = float(model["loss"].d)
        seconds = time.perf_counter() - start
        accuracy = model["evaluate"]()
    return MeasuredRun(
        name, label, policy, scale, applied, loss_finite, absmax, flushed, flushed_small, loss,
        accuracy, seconds, f"{model['data']}; {model['arch']}",
    )  # fmt: skip
