"""The flush-sampling schedule (:mod:`updater.driver.recording.flush_schedule`) applied to a trace
that measured flushing on every recorded step, without nnabla passes: each step's overflow
search replayed as ``benchmarks.bench_probes`` does (the step overflows from the middle of its
probed bracket), the schedule asked after it, and the flush measurements it would not have made
dropped. What :mod:`benchmarks.bench_flush_sampling` and the tests compare with the every-step
measurement."""

from __future__ import annotations

import copy
from typing import Iterator, Tuple

import numpy as np

from benchmarks.bench_probes import _Scripted
from updater.driver.recording.flush_schedule import (
    FLUSH_PASSES,
    FlushSchedule,
    sampled_steps,
)
from updater.driver.recording.probes import probe_step
from updater.trace import Trace

BOUNDS = (1.0, 2.0**15)
"""The probe bounds of the shipped recordings' policy (``DynamicScale()``)."""


def searched(trace: Trace, scales) -> Iterator[Tuple[int, float, float, int]]:
    """Per good step of ``trace`` (recorded at seeds ``scales``) with overflow thresholds:
    ``(step, seed, threshold, passes)`` of the search from the previous threshold, replayed."""
    guess = None
    for t, (seed, over, bad) in enumerate(zip(scales, trace.overflow_scale, trace.nonfinite)):
        if bad:
            continue
        found = probe_step(
            _Scripted(over * 0.75),
            float(seed),
            seed < over * 0.75,
            np.inf,
            True,
            False,
            BOUNDS,
            guess,
        )
        guess = found.threshold if found.threshold < np.inf else (found.finite_scale or None)
        yield t, float(seed), found.threshold, found.passes


def schedule_sampled(
    trace: Trace, scales, seed: int = 0, every: int | None = None, budget: float = 2.0
) -> Tuple[Trace, float, int]:
    """``trace`` with flush measurements kept on the steps a
    :class:`~updater.driver.recording.flush_schedule.FlushSchedule` (``every``, ``budget``,
    ``seed``) chooses, the extra passes per recorded step a recording at its defaults would
    have run (search plus 4 per measured step) and the number of measured steps.

    Args:
        trace (Trace): measured on every recorded step (``Probes(flush_every=1)``), with
            overflow thresholds.
        scales (array of float): the seed of each recorded step.
        seed (int, default 0): seed of the schedule's randomised share.
        every (int or None, default None): ``Probes.flush_every``.
        budget (float, default 2.0): ``Probes.pass_budget``.
    """
    steps = list(searched(trace, scales))
    schedule = FlushSchedule(every, budget, 1, seed)
    chosen = sampled_steps(schedule, [step[3] for step in steps])
    keep = np.zeros(trace.steps, bool)
    keep[[steps[i][0] for i in chosen]] = True
    out = copy.deepcopy(trace)
    out.flush_scales[~keep], out.flush_shares[~keep] = np.nan, np.nan
    passes = sum(step[3] for step in steps) + FLUSH_PASSES * len(chosen)
    return out, passes / trace.steps, len(chosen)
