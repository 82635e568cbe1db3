"""What varies within a recording: a policy's metrics over block-bootstrapped recordings.

Another batch order gives other overflowing steps. A recording holds many steps, and the steps
of one stretch of training vary from one another much as those of another batch order vary, so
re-drawing stretches of a recording shows how much a policy's count moves when the steps do
(:func:`bootstrap_metrics`). The draw is a local block bootstrap: the steps are cut into blocks
of :data:`BLOCK_SHARE` of the recording; each block's place is filled by a block of the same
length that starts within one block of it (training changes as it goes: a block from the end
never stands in for one from the start), taken from a recording drawn at random among those
given. Each drawn recording is replayed exactly (jitter 0), all of them together as the runs of
one replay (:mod:`sim.replay.exact`). What differs between whole batch orders beyond this (a run
that overflows more all along) is the calibrated factor of :mod:`sim.replay.spread`.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence, Tuple

import numpy as np

from sim.replay.clock import training_clock
from sim.replay.exact import exact_metrics
from updater.common.validation import check_int
from updater.trace import Trace
from updater.trace.parts import concat_traces

BLOCK_SHARE = 0.05
"""The length of a block as a share of the recording's steps (at least one step)."""
RESAMPLES = 16
"""Bootstrapped recordings drawn per prediction."""


def block_indices(steps: int, recordings: int, rng: np.random.Generator) -> np.ndarray:
    """One local block bootstrap draw (module doc) over ``recordings`` recordings of ``steps``
    steps each, as indices into their steps laid end to end (recording ``i``'s step ``t`` is
    ``i * steps + t``).

    Args:
        steps (int, >= 1): steps of each recording.
        recordings (int, >= 1): how many recordings to draw from.
        rng (numpy.random.Generator): the draw's randomness.

    >>> idx = block_indices(100, 2, np.random.default_rng(0))
    >>> idx.shape, bool(((idx % 100) < 100).all()), int(np.diff(idx[:5]).max())
    ((100,), True, 1)
    """
    check_int("steps", steps, 1)
    check_int("recordings", recordings, 1)
    block = max(1, round(BLOCK_SHARE * steps))
    parts = []
    for place in range(0, steps, block):
        length = min(block, steps - place)
        start = int(np.clip(place + rng.integers(-block, block + 1), 0, steps - length))
        parts.append(rng.integers(recordings) * steps + start + np.arange(length))
    return np.concatenate(parts)


def bootstrap_draws(recordings: Sequence[Trace], seed: int = 0) -> Tuple[Trace, List[np.ndarray]]:
    """The :data:`RESAMPLES` block-bootstrapped recordings drawn from ``recordings`` (module
    doc): their steps laid end to end, without what the replay never reads, and each draw's
    :func:`block_indices` into them.

    Args:
        recordings (sequence of Trace): recordings of one model, of one step count.
        seed (int, default 0): seed of the draws, >= 0.
    """
    check_int("seed", seed, 0)
    lean = [_lean(training_clock(t)) for t in recordings]
    steps = {t.steps for t in lean}
    if len(steps) != 1:
        raise ValueError(f"recordings must have one step count, got {sorted(steps)}")
    joined = concat_traces(lean, lean[0].name)
    rng = np.random.default_rng(seed)
    return joined, [block_indices(lean[0].steps, len(lean), rng) for _ in range(RESAMPLES)]


def bootstrap_metrics(
    policy, recordings: Sequence[Trace], metrics: Sequence[str], seed: int = 0
) -> Dict[str, np.ndarray]:
    """``policy``'s ``metrics`` over :data:`RESAMPLES` block-bootstrapped recordings drawn from
    ``recordings`` (:func:`bootstrap_draws`), each replayed exactly, all at once
    (:func:`sim.replay.exact.exact_metrics`).

    Args:
        policy: the replayed policy.
        recordings (sequence of Trace): recordings of one model, of one step count.
        metrics (sequence of str): per-run metrics (:data:`sim.replay.metrics.METRICS`).
        seed (int, default 0): seed of the draws, >= 0.

    Returns:
        dict metric -> float64 array of :data:`RESAMPLES` values.
    """
    joined, draws = bootstrap_draws(recordings, seed)
    return exact_metrics(policy, [(joined, index) for index in draws], metrics)


def _lean(trace: Trace) -> Trace:
    """``trace`` without what the skipped steps and the safe scale never read (per-layer
    histograms, flush measurements, forward headroom)."""
    return dataclasses.replace(trace, layers=None, flush=None, forward=None)
