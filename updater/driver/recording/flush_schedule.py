"""Which recorded steps have their flushing measured (``Probes(flush=True)``): every k-th one
(``Probes(flush_every=k)``), or by default a sample that keeps the recorder within a budget of
extra passes per recorded step (``Probes(pass_budget=2.0)``), overflow probes included.

The sample (``flush_every=None``): each recorded step adds ``pass_budget`` minus the passes its
overflow search ran to a credit, and a measurement (one float32 pass and three float16 scales:
4 passes per accumulation round) spends what it ran; no step is measured while the credit holds
less than one measurement, so over any stretch of a recording from its start the passes stay
within the budget, except where the search alone costs more (then nothing is measured:
``Probes(flush_every=k)`` measures anyway). The first step whose credit holds a measurement is
measured (the 2nd or 3rd at the defaults). After it a step is measured when the credit holds
one measurement and the step's scale or its probed overflow threshold differs from the previous
recorded step's (the flushed share moves with the scale), and elsewhere when the credit holds
``1 + u`` measurements, ``u`` drawn uniformly from [0, 1) after each measurement: a randomised
share at the rate the budget leaves, so that no period of the data (an epoch, a cycle of the
scale) lines up with the sample. The draws come from a generator seeded with ``seed``: a
recording of the same run samples the same steps.

Every step has the same chance of a randomised measurement whatever its gradients: the replay
interpolates the measured steps' flushing beyond the histogram's to the steps between
(:func:`sim.casting.underflow.measured_flushed_share`), which a sample favouring the steps whose
histogram shows a spike would spread over their unmeasured neighbours.

NumPy and the standard library only: the simulator applies the same schedule to a trace
measured on every step (:func:`sampled_steps`).
"""

from __future__ import annotations

import math
import random
from typing import Iterable, List, Tuple

FLUSH_PASSES = 4
"""Passes of one flush measurement per accumulation round: the float32 copy and three float16
scales (:data:`updater.driver.recording.probes.FLUSH_OFFSETS`)."""


class FlushSchedule:
    """The choice of recorded steps whose flushing is measured (module doc).

    Args:
        every (int or None): measure every this many recorded steps (>= 1); None: the sample
            within ``budget``.
        budget (float): with ``every`` None, the extra passes per recorded step the probes may
            run (> 0), overflow search included.
        rounds (int, default 1): forward/backward rounds per attempt (``accum_grad``, >= 1): a
            measurement costs ``4 * rounds`` passes.
        seed (int, default 0): seed of the randomised share.

    >>> s = FlushSchedule(None, 2.0)
    >>> [s.due(i, 1.0, 8.0, 1) for i in range(4)]  # search 1 pass: 1 pass of credit a step
    [False, False, False, True]
    >>> s.spent(4)
    >>> [s.due(i, 1.0, 8.0 if i < 8 else 16.0, 1) for i in range(4, 9)]  # threshold moved
    [False, False, False, False, True]
    """

    def __init__(self, every: int | None, budget: float, rounds: int = 1, seed: int = 0):
        self.every = every
        self.budget = float(budget)
        self.cost = FLUSH_PASSES * int(rounds)
        self.credit = 0.0
        self._rng = random.Random(seed)
        self._extra = self._rng.random()  # u: the randomised share waits for 1 + u measurements
        self._last: Tuple[float, float] | None = None  # previous recorded step's (scale, threshold)
        self._measured = 0

    def due(self, recorded: int, scale: float, threshold: float, search_passes: int) -> bool:
        """Whether recorded step number ``recorded`` (0-based) is measured, after its overflow
        search: ``scale`` its seed, ``threshold`` the smallest scale it overflowed at (inf:
        none or not probed), ``search_passes`` the passes that search ran. Call it once per
        recorded step, in order, then :meth:`spent` with the measurement's passes when True."""
        previous, self._last = self._last, (float(scale), float(threshold))
        if self.every is not None:
            return recorded % self.every == 0
        self.credit += self.budget - search_passes
        if self.credit < self.cost:
            return False
        if self._measured == 0:
            return True
        moved = previous is not None and not _same(previous, self._last)
        return moved or self.credit >= self.cost * (1.0 + self._extra)

    def spent(self, passes: int) -> None:
        """The measurement :meth:`due` asked for ran ``passes`` passes."""
        self._measured += 1
        self.credit -= passes
        self._extra = self._rng.random()


def _same(a: Tuple[float, float], b: Tuple[float, float]) -> bool:
    """Whether two (scale, threshold) pairs are equal (inf equal to inf)."""
    return all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))


def sampled_steps(
    schedule: FlushSchedule, steps: Iterable[Tuple[float, float, int]], passes: int | None = None
) -> List[int]:
    """The recorded steps ``schedule`` measures, given each step's ``(scale, threshold,
    search_passes)`` in order (what the recorder saw), each measurement costing ``passes``
    (default the schedule's cost).

    >>> sampled_steps(FlushSchedule(3, 2.0), [(1.0, 8.0, 1)] * 7)
    [0, 3, 6]
    """
    chosen = []
    for i, (scale, threshold, search) in enumerate(steps):
        if schedule.due(i, scale, threshold, search):
            schedule.spent(schedule.cost if passes is None else passes)
            chosen.append(i)
    return chosen
