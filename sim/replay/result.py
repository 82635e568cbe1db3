"""The result of replaying one policy over one trace (:class:`RunResult`): trajectories, each
step's largest safe scale, the flushed shares (:mod:`sim.casting.underflow`) and the per-run metrics
(:mod:`sim.replay.metrics`). :mod:`sim.replay.run` runs the replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict

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
    safe = largest_safe_scale(absmax)  # a new array (or a scalar), so written in place
    if overflow_from is not None:
        safe = _into(np.minimum, safe, _largest_power_of_two_below(overflow_from))
    if floor is not None:
        safe = _into(np.maximum, safe, floor)
    return safe if max_scale is None else _into(np.minimum, safe, max_scale)


def _into(ufunc, safe, other):
    """``ufunc(safe, other)``, written into ``safe`` when it is an array of the result's shape."""
    own = (
        isinstance(safe, np.ndarray)
        and np.broadcast_shapes(safe.shape, np.shape(other)) == safe.shape
    )
    return ufunc(safe, other, out=safe if own else None)


def run_result(policy, trace, absmax, factor, scale_all, overflow, label) -> RunResult:
    """The :class:`RunResult` of a replay: ``scale_all`` (steps + 1, runs) and ``overflow``
    (steps, runs) from the loop, ``absmax`` and ``factor`` (steps, runs or 1) as it used them.
    The safe scales, flushed shares and metrics are worked out a block of runs at a time
    (:func:`run_blocks`): each run's values do not depend on the others'. The metrics include
    what the flushed shares rest on (:func:`sim.replay.flush_basis.flush_run_metrics`)."""
    scale = scale_all[:-1]
    basis = flush_basis(trace)
    skipped = overflow | trace.nonfinite[:, None]
    cap = getattr(policy, "max_scale", None)
    absmax, factor = np.broadcast_to(absmax, scale.shape), np.broadcast_to(factor, scale.shape)
    safe, flushed = np.empty(scale.shape), np.empty(scale.shape)
    parts = []
    for cols in run_blocks(*scale.shape):
        over, floor = overflow_limits(trace, factor[:, cols])
        safe[:, cols] = safe_scales(absmax[:, cols], over, cap, floor)
        flushed[:, cols] = replay_flushed_share(trace, scale[:, cols] * factor[:, cols])
        parts.append(
            run_metrics(
                scale[:, cols],
                overflow[:, cols],
                skipped[:, cols],
                safe[:, cols],
                flushed[:, cols],
                trace.nonfinite,
            )
        )
        parts[-1].update(
            flush_run_metrics(basis, scale[:, cols], skipped[:, cols], flushed[:, cols])
        )
    metrics = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
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
