"""float16's limits, the one home of the float16 facts both packages use
(the simulator counts what a cast does with them), and the share of gradient values a float16
backward pass flushed (:func:`flushed_shares`, read by the probes and the measured runs).

A magnitude ``x`` rounds to float16 as: 0 when ``x <= 2**-25`` (the tie at ``2**-25`` rounds to
even, 0), a subnormal multiple of ``2**-24`` below ``2**-14``, a normal up to 65504, and inf
from 65520 on (the tie at 65520 rounds to even, inf).
"""

from __future__ import annotations

from typing import List

import numpy as np

FP16_MAX = 65504.0
"""Largest finite float16 value."""
FP16_OVERFLOW = 65520.0
"""Smallest magnitude that float16 rounds to inf."""
FP16_SMALLEST_NORMAL = 2.0**-14
"""Smallest positive normal float16 value."""
FP16_SMALLEST_SUBNORMAL = 2.0**-24
"""Smallest positive float16 value; a float16 loss-scale seed below it rounds to 0."""
FP16_FLUSH_EDGE = 2.0**-25
"""Magnitudes at or below this round to 0."""
FP16_FLUSH_BINADE = -25
"""Binade of ``FP16_FLUSH_EDGE``: values in lower binades flush to 0; in this binade only the
exact power of two flushes, the rest round up to ``2**-24``."""
LARGEST_SEED_POWER = {"float16": 2.0**15, "float32": 2.0**127}
"""The largest power of two a backward seed of each precision holds (float16's max is 65504)."""
FORWARD_NEAR_FACTOR = 4.0
"""The forward pass's measure (largest output or accumulated magnitude) is warned about within
this factor of FP16_MAX (``updater.driver.recording``, the recorder, ``dls``, the report)."""
SEED_MAX = {"float16": FP16_MAX, "float32": 3.4028234663852886e38}
"""The largest finite backward seed of each precision."""


def flushed_shares(true: List[np.ndarray], half: List[np.ndarray], scale: float) -> tuple:
    """Shares of the nonzero ``true`` gradient values that are zero in ``half`` (the float16
    backward at ``scale``, unscaled or not): all of them, and those whose true value times
    ``scale`` is below float16's smallest subnormal 2**-24 (the part a binade model counts).

    >>> flushed_shares([np.array([1.0, 1e-9, 0.0])], [np.array([2.0, 0.0, 0.0])], 1.0)
    (0.5, 0.5)
    """
    nonzero = max(sum(int(np.count_nonzero(g)) for g in true), 1)
    lost = small = 0
    for g, h in zip(true, half):
        zeroed = (g != 0) & (h == 0)
        lost += int(zeroed.sum())
        small += int((zeroed & (np.abs(g) * scale < FP16_SMALLEST_SUBNORMAL)).sum())
    return lost / nonzero, small / nonzero
