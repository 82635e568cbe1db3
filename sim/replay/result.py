"""The result of replaying one policy over one trace (:class:`RunResult`): trajectories, each
step's largest safe scale, the flushed shares (:mod:`sim.casting.underflow`) and the per-run metrics
(:mod:`sim.replay.metrics`). :mod:`sim.replay.run` runs the replay.

A result holds what the replay's loop made (the scales and overflow flags) and the per-run
metrics; the other per-(step, run) arrays (skipped steps, safe scales, flushed shares) are worked
out a block of runs at a time for the metrics and dropped, and worked out again, whole, on first
access (:class:`Replayed`): at 10,000,000 runs each is 800 MB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Dict

import numpy as np

from sim.casting.underflow import replay_flushed_share
from sim.replay.flush_basis import flush_basis, flush_run_metrics
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
        metrics (dict of arrays (runs,)): per run, see :func:`run_metrics`.
        source (callable): ``source(name, scale, overflow)`` gives the per-(step, run) array
            ``name`` (:data:`DERIVED`) of the runs whose ``scale`` and ``overflow`` it is given
            (a :class:`Replayed`; the metrics never need them whole, a figure or the report's
            tail shares read them).

    Each array of :data:`DERIVED` is a property worked out by ``source`` on first access and
    kept:

    - ``skipped`` (bool array (steps, runs)): the step was skipped (overflow or bad batch).
    - ``safe_scale`` (float64 array (steps, runs)): largest power of two ``s`` with
      ``s * unscaled absmax <= 65504`` and below the step's recorded overflow threshold
      (capped at the policy's ``max_scale`` if it has one).
    - ``flushed`` (float64 array (steps, runs)): share of nonzero values flushed at that scale.
    """

    label: str
    policy: Any
    trace_name: str
    scale: np.ndarray
    overflow: np.ndarray
    metrics: Dict[str, np.ndarray]
    source: Callable[[str, np.ndarray, np.ndarray], np.ndarray] = field(compare=False)

    @cached_property
    def skipped(self) -> np.ndarray:
        """The steps skipped (overflow or bad batch), bool (steps, runs)."""
        return self.source("skipped", self.scale, self.overflow)

    @cached_property
    def safe_scale(self) -> np.ndarray:
        """Each step's largest safe scale for each run, float64 (steps, runs)."""
        return self.source("safe_scale", self.scale, self.overflow)

    @cached_property
    def flushed(self) -> np.ndarray:
        """The share of nonzero values flushed at each run's scale, float64 (steps, runs)."""
        return self.source("flushed", self.scale, self.overflow)

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
        skipped = float(self.metrics["skipped"].mean())
        return (
            f"RunResult(label={self.label!r}, trace={self.trace_name!r}, steps={self.steps}, "
            f"runs={self.runs}, skipped_per_run={skipped:g})"
        )

    def summary(self) -> Dict[str, Any]:
        """One row of run-averaged metrics (see :func:`summarize`)."""
        return summarize(self.metrics, self.steps, label=self.label, trace=self.trace_name)


RUN_BLOCK = 1 << 17
"""About how many (step, run) values :func:`run_blocks` puts in a block: its temporaries stay
in the cache."""
MIN_BLOCK_RUNS = 1 << 14
"""Fewest runs in a block (fewer only when there are fewer runs)."""


def run_blocks(steps: int, runs: int) -> list:
    """Slices that split ``runs`` runs of ``steps`` steps into blocks of about ``RUN_BLOCK``
    values, each at least ``MIN_BLOCK_RUNS`` runs wide (or all the runs). Never one run out of
    many: NumPy's loops over a one-column view are its strided ones, whose exp2 and log2 may
    round differently from the contiguous ones every other block takes."""
    n = max(1, runs // max(MIN_BLOCK_RUNS, RUN_BLOCK // steps))
    edges = [runs * i // n for i in range(n + 1)]
    return [slice(start, stop) for start, stop in zip(edges, edges[1:])]


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


def overflow_thresholds(trace) -> tuple:
    """The recorded part of the replay's overflow rule (:mod:`sim.replay.run`) before jitter:
    ``(threshold, floor)``. ``threshold`` (float64 ``(steps,)``, or None when the trace records
    none): the loss scale from which a step overflows, inf where none was recorded. A probed
    threshold ``S`` only says the real limit lies in ``(S/2, S]`` (the probes step by powers of
    two), so its threshold is the bracket's geometric middle ``S / sqrt(2)``: the same verdict
    at every power-of-two scale without jitter, and the jittered replay converges to it as the
    jitter goes to 0. ``floor`` (float64 ``(steps, 1)``): the trace's ``finite_scale``; at or
    below it a step never overflows (0: not known)."""
    floor = trace.finite_scale[:, None]
    over = trace.overflow_scale
    if not np.isfinite(over).any():
        return None, floor
    return (over / np.sqrt(2.0) if trace.overflow_probed else over), floor


def overflow_limits(trace, factor) -> tuple:
    """:func:`overflow_thresholds` under jitter: ``(limit, floor)``, ``limit`` (float64
    ``(steps, columns of factor)``, or None) the threshold divided by the jitter factor."""
    threshold, floor = overflow_thresholds(trace)
    return (None if threshold is None else threshold[:, None] / factor), floor


def safe_scales(absmax, overflow_from=None, max_scale=None, floor=None) -> np.ndarray:
    """The largest safe scale of each step: the largest power of two ``s`` with
    ``s * absmax <= 65504``, strictly below ``overflow_from`` (the scale from which the step
    overflows; inf or None where it never does), at least ``floor`` (a scale the step was seen
    finite at; None: not known) and at most ``max_scale`` (None: no cap). Arguments broadcast
    together; the result is float64."""
    safe = largest_safe_scale(absmax)  # a new array (or a scalar), so written in place
    if overflow_from is not None:
        safe = _into(np.minimum, safe, _largest_power_of_two_below(overflow_from))
    if floor is not None and np.any(np.greater(floor, 0)):  # 0: not known (safe >= 0 or NaN)
        safe = _into(np.maximum, safe, floor)
    return safe if max_scale is None else _into(np.minimum, safe, max_scale)


def _into(ufunc, safe, other):
    """``ufunc(safe, other)``, written into ``safe`` when it is an array of the result's shape."""
    own = (
        isinstance(safe, np.ndarray)
        and np.broadcast_shapes(safe.shape, np.shape(other)) == safe.shape
    )
    return ufunc(safe, other, out=safe if own else None)


DERIVED = ("skipped", "safe_scale", "flushed")
"""The per-(step, run) arrays a :class:`RunResult` works out on first access."""


class Replayed:
    """The :attr:`RunResult.source` of a replay: works out the arrays of :data:`DERIVED` for
    any runs (a block, or all of them) from what the replay drew.

    Args:
        trace (Trace): the replayed trace (on the training clock).
        factor (float64 array (steps, runs or 1)): the jitter factors the loop used (kept by
            reference, not copied).
        cap (float or None): the policy's ``max_scale`` (None: no cap).
    """

    def __init__(self, trace, factor: np.ndarray, cap=None):
        self.trace, self.factor, self.cap = trace, factor, cap

    def block(self, scale: np.ndarray, overflow: np.ndarray, cols: slice) -> tuple:
        """``(skipped, safe_scale, flushed)`` of the runs ``cols`` of ``scale`` and ``overflow``
        (steps, runs), each (steps, width)."""
        return tuple(self._part(name, scale, overflow, cols) for name in DERIVED)

    def _part(self, name: str, scale: np.ndarray, overflow: np.ndarray, cols: slice):
        """The array ``name`` of :data:`DERIVED` for the runs ``cols``."""
        if name == "skipped":
            return overflow[:, cols] | self.trace.nonfinite[:, None]
        factor = np.broadcast_to(self.factor, scale.shape)[:, cols]
        if name == "flushed":
            return replay_flushed_share(self.trace, scale[:, cols] * factor)
        over, floor = overflow_limits(self.trace, factor)
        return safe_scales(self.trace.absmax[:, None] * factor, over, self.cap, floor)

    def __call__(self, name: str, scale: np.ndarray, overflow: np.ndarray) -> np.ndarray:
        """The array ``name`` of :data:`DERIVED` for every run, worked out a block at a time."""
        if name == "skipped":
            return self._part(name, scale, overflow, slice(None))
        out = np.empty(scale.shape)
        for cols in run_blocks(*scale.shape):
            out[:, cols] = self._part(name, scale, overflow, cols)
        return out


def run_result(policy, trace, factor, scale_all, overflow, label) -> RunResult:
    """The :class:`RunResult` of a replay: ``scale_all`` (steps + 1, runs) and ``overflow``
    (steps, runs) from the loop, ``factor`` (steps, runs or 1) as it used it. The metrics are
    worked out a block of runs at a time (:func:`run_blocks`: each run's values do not depend
    on the others'), from the block's skipped steps, safe scales and flushed shares
    (:meth:`Replayed.block`), which are then dropped; they include what the flushed shares rest
    on (:func:`sim.replay.flush_basis.flush_run_metrics`)."""
    scale = scale_all[:-1]
    basis = flush_basis(trace)
    source = Replayed(trace, factor, getattr(policy, "max_scale", None))
    metrics: Dict[str, np.ndarray] = {}
    for cols in run_blocks(*scale.shape):
        skipped, safe, flushed = source.block(scale, overflow, cols)
        part = run_metrics(
            scale[:, cols], overflow[:, cols], skipped, safe, flushed, trace.nonfinite
        )
        if basis.per_step:
            part.update(flush_run_metrics(basis, scale[:, cols], skipped, flushed))
        for name, values in part.items():
            if name not in metrics:
                metrics[name] = np.empty(scale.shape[1], values.dtype)
            metrics[name][cols] = values
    if not basis.per_step:  # worked out from signal_lost, all runs at once
        metrics.update(flush_run_metrics(basis, scale, None, None, metrics["signal_lost"]))
    metrics["final_scale"] = scale_all[-1]  # a view: the result keeps scale_all anyway
    return RunResult(
        label=label or policy_label(policy),
        policy=policy,
        trace_name=trace.name,
        scale=scale,
        overflow=overflow,
        metrics=metrics,
        source=source,
    )
