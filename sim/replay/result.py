"""The result of replaying one policy over one trace (:class:`RunResult`): trajectories, each
step's largest safe scale, the flushed shares (:mod:`sim.casting.underflow`) and the per-run metrics
(:mod:`sim.replay.metrics`). :mod:`sim.replay.run` runs the replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict

import numpy as np

from sim.casting.underflow import replay_flushed_share
from sim.replay.metrics import run_metrics, summarize
from updater.policy import largest_safe_scale
from updater.policy.presets import PRESETS


@dataclass(repr=False)
class RunResult:
    """Trajectories and per-run metrics of one policy over one trace.

    Attributes:
        label (str): the policy's label (preset name or class name).
        policy: the policy object.
        trace_name (str): the trace's name.
        scale (float64 array (steps, runs)): the scale used at each step.
        overflow (bool array (steps, runs)): the scaled gradients overflowed (``a >= 65520``,
            or the scale reached the step's recorded ``overflow_scale``; see the module doc).
        skipped (bool array (steps, runs)): the step was skipped (overflow or bad batch).
        safe_scale (float64 array (steps, runs)): largest power of two ``s`` with
            ``s * unscaled absmax <= 65504`` and below the step's recorded overflow threshold
            (capped at the policy's ``max_scale`` if it has one).
        flushed (float64 array (steps, runs)): share of nonzero values flushed at that scale.
        metrics (dict of arrays (runs,)): per run, see :func:`run_metrics`.
    """

    label: str
    policy: Any
    trace_name: str
    scale: np.ndarray
    overflow: np.ndarray
    skipped: np.ndarray
    safe_scale: np.ndarray
    flushed: np.ndarray
    metrics: Dict[str, np.ndarray]

    @property
    def steps(self) -> int:
        """Number of steps."""
        return int(self.scale.shape[0])

    @property
    def runs(self) -> int:
        """Number of runs."""
        return int(self.scale.shape[1])

    def __repr__(self) -> str:
        """One line: the policy, the trace, the size and the mean skipped steps per run (the
        arrays are in the attributes; :meth:`summary` gives every metric)."""
        skipped = float(self.skipped.sum(axis=0).mean())
        return (
            f"RunResult(label={self.label!r}, trace={self.trace_name!r}, steps={self.steps}, "
            f"runs={self.runs}, skipped_per_run={skipped:g})"
        )

    def summary(self) -> Dict[str, Any]:
        """One row of run-averaged metrics (see :func:`summarize`)."""
        return summarize(self.metrics, self.steps, label=self.label, trace=self.trace_name)


def policy_label(policy) -> str:
    """The preset name of ``policy`` if it equals one, else its class name."""
    for name, preset in PRESETS.items():
        if preset == policy:
            return name
    return type(policy).__name__


def _largest_power_of_two_below(limit) -> np.ndarray:
    """Largest power of two strictly below ``limit`` (inf for inf)."""
    with np.errstate(over="ignore"):
        return np.exp2(np.ceil(np.log2(limit)) - 1.0)


def overflow_limits(trace, factor) -> tuple:
    """The recorded part of the replay's overflow rule (:mod:`sim.replay.run`): ``(limit,
    floor)``. ``limit`` (float64 ``(steps, columns of factor)``, or None when the trace records
    no threshold): the loss scale from which a step overflows, its threshold divided by the
    jitter factor, inf where none was recorded. A probed threshold ``S`` only says the real
    limit lies in ``(S/2, S]`` (the probes step by powers of two), so its limit is the
    bracket's geometric middle ``S / sqrt(2)``: the same verdict at every power-of-two scale
    without jitter, and the jittered replay converges to it as the jitter goes to 0. ``floor``
    (float64 ``(steps, 1)``): the trace's ``finite_scale``; at or below it a step never
    overflows (0: not known)."""
    floor = trace.finite_scale[:, None]
    over = trace.overflow_scale
    if not np.isfinite(over).any():
        return None, floor
    middle = over / np.sqrt(2.0) if trace.overflow_probed else over
    return middle[:, None] / factor, floor


def safe_scales(absmax, overflow_from=None, max_scale=None, floor=None) -> np.ndarray:
    """The largest safe scale of each step: the largest power of two ``s`` with
    ``s * absmax <= 65504``, strictly below ``overflow_from`` (the scale from which the step
    overflows; inf or None where it never does), at least ``floor`` (a scale the step was seen
    finite at; None: not known) and at most ``max_scale`` (None: no cap). Arguments broadcast
    together; the result is float64."""
    safe = largest_safe_scale(absmax)
    if overflow_from is not None:
        safe = np.minimum(safe, _largest_power_of_two_below(overflow_from))
    if floor is not None:
        safe = np.maximum(safe, floor)
    return safe if max_scale is None else np.minimum(safe, max_scale)


def run_result(policy, trace, absmax, factor, scale_all, overflow, label) -> RunResult:
    scale = scale_all[:-1]
    skipped = overflow | trace.nonfinite[:, None]
    over, floor = overflow_limits(trace, factor)
    cap = getattr(policy, "max_scale", None)
    safe = safe_scales(np.broadcast_to(absmax, scale.shape), over, cap, floor)
    flushed = replay_flushed_share(trace, scale * factor)
    metrics = run_metrics(scale, overflow, skipped, safe, flushed, trace.nonfinite)
    metrics["final_scale"] = scale_all[-1].copy()
    return RunResult(
        label=label or policy_label(policy),
        policy=policy,
        trace_name=trace.name,
        scale=scale,
        overflow=overflow,
        skipped=skipped,
        safe_scale=safe,
        flushed=flushed,
        metrics=metrics,
    )
