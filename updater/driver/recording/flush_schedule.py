"""Which recorded steps have their flushing measured (``Probes(flush=True)``): every k-th one
(``Probes(flush_every=k)``), or by default a random sample that keeps the recorder within a
budget of extra passes per recorded step (``Probes(pass_budget=2.0)``), overflow probes
included.

The sample (``flush_every=None``): each recorded step adds ``pass_budget`` minus the passes its
overflow search ran to a credit, and a measurement (one float32 pass and three float16 scales:
4 passes per accumulation round) spends what it ran; no step is measured while the credit holds
less than one measurement, so over any stretch of a recording from its start the passes stay
within the budget, except where the search alone costs more (then nothing is measured:
``Probes(flush_every=k)`` measures anyway). The first step whose credit holds a measurement is
measured (the 2nd at the defaults where the search costs nothing). After it each step is
measured with a chance drawn independently of the step: :data:`SPEND` of the passes per step
the search leaves (averaged over about :data:`HORIZON` steps) plus the credit held spread over
:data:`HORIZON` steps, over the cost of a measurement; it moves slowly, with the search's cost,
not with the step. The draws come from a generator seeded with ``seed``: a recording of the
same run samples the same steps.

Why a chance independent of the step: the replay interpolates the measured steps' flushing (beyond
what the histograms show) to the steps between them
(:func:`sim.casting.underflow.measured_flushed_share`), which is unbiased only when whether a
step is measured says nothing of its flushing. Applied to the conv net's first 250 steps
recorded with every step measured (20 seeds, the replay under four policies), measuring first
the steps whose scale or overflow threshold moved moved its flushed share by -45% on average
against every step, and spacing the measurements by the credit alone by -24%; this chance, -8%
(its error is mostly the sample's: ``benchmarks.bench_flush_sampling``).

NumPy and the standard library only: the benchmark applies the same schedule to a trace
measured on every step (:func:`sampled_steps`).
"""

from __future__ import annotations

import random
from typing import Iterable, List

FLUSH_PASSES = 4
"""Passes of one flush measurement per accumulation round: the float32 copy and three float16
scales of :func:`updater.driver.recording.flush_scales.flush_scales` but the step's own (at
most: a scale at or above the step's overflow threshold costs none)."""
SPEND = 0.9
"""Share of the passes the searches leave within the budget that the draws spend on average:
the rest keeps the credit above one measurement, so that the credit seldom decides."""
HORIZON = 32
"""Recorded steps over which the draws spend the credit held, and over which the search's
passes per step are averaged (exponentially): the chance moves slowly with them."""


class FlushSchedule:
    """The choice of recorded steps whose flushing is measured (module doc).

    Args:
        every (int or None): measure every this many recorded steps (>= 1); None: the sample
            within ``budget``.
        budget (float): with ``every`` None, the extra passes per recorded step the probes may
            run (> 0), overflow search included.
        rounds (int, default 1): forward/backward rounds per attempt (``accum_grad``, >= 1): a
            measurement costs ``4 * rounds`` passes.
        seed (int, default 0): seed of the draws.

    >>> s = FlushSchedule(None, 2.0)
    >>> [s.due(i, 1) for i in range(4)]  # search 1 pass: 1 pass of credit a step
    [False, False, False, True]
    >>> s.spent(4)
    >>> n = sum(s.due(i, 1) and s.spent(4) is None for i in range(4, 4004))
    >>> round(n / 4000, 2), s.credit >= 0  # 1 pass left a step: a quarter, within budget
    (0.25, True)
    """

    def __init__(self, every: int | None, budget: float, rounds: int = 1, seed: int = 0):
        self.every = every
        self.budget = float(budget)
        self.cost = FLUSH_PASSES * int(rounds)
        self.credit = 0.0
        self._rng = random.Random(seed)
        self._measured = 0
        # the search's passes per step, averaged over about HORIZON steps (None: no step yet)
        self._search: float | None = None

    def due(self, recorded: int, search_passes: int) -> bool:
        """Whether recorded step number ``recorded`` (0-based) is measured, after its overflow
        search ran ``search_passes`` passes. Call it once per recorded step, in order, then
        :meth:`spent` with the measurement's passes when True."""
        if self.every is not None:
            return recorded % self.every == 0
        self.credit += self.budget - search_passes
        mean = search_passes if self._search is None else self._search
        self._search = mean + (search_passes - mean) / HORIZON
        if self.credit < self.cost:
            return False
        if self._measured == 0:
            return True
        left = max(self.budget - self._search, 0.0) + self.credit / HORIZON
        return self._rng.random() * self.cost < SPEND * left

    def spent(self, passes: int) -> None:
        """The measurement :meth:`due` asked for ran ``passes`` passes."""
        self._measured += 1
        self.credit -= passes


def sampled_steps(
    schedule: FlushSchedule, search_passes: Iterable[int], passes: int | None = None
) -> List[int]:
    """The recorded steps ``schedule`` measures, given each step's search passes in order, each
    measurement costing ``passes`` (default the schedule's cost).

    >>> sampled_steps(FlushSchedule(3, 2.0), [1] * 7)
    [0, 3, 6]
    """
    chosen = []
    for i, search in enumerate(search_passes):
        if schedule.due(i, search):
            schedule.spent(schedule.cost if passes is None else passes)
            chosen.append(i)
    return chosen


def flush_schedule(probes, rounds: int) -> FlushSchedule | None:
    """A new choice of the recorded steps whose flushing ``probes`` (a
    :class:`~updater.driver.probe_options.Probes`) measure, for an updater running ``rounds``
    forward/backward rounds per attempt (None without ``flush``).

    >>> from updater.driver.probe_options import Probes
    >>> flush_schedule(Probes(flush=True), rounds=1).cost
    4
    """
    if not probes.flush:
        return None
    return FlushSchedule(probes.flush_every, probes.pass_budget, rounds)
