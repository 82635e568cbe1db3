"""The predictive spread: where the value of a run no recording saw should fall.

A recording is one sample of training; a real run under another policy, in another batch order,
is another sample. Replayed exactly, ``n`` recordings give ``n`` values of a metric, whose
disagreement measures what varies from one training run to the next (the batch order, and the
trajectory a policy's own skips cause), which the per-step jitter of one recording does not.
:func:`prediction_interval` is the Student-t prediction interval for one new draw from those
``n`` values: for normally distributed values it holds the next draw with probability ``level``
exactly, whatever ``n >= 2`` (with two recordings its half-width is 6.3 times their standard
deviation times sqrt(3/2): wide, and honest about it). One recording supports no such interval
(None): a prediction from one recording says so rather than print a level.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Dict, Sequence, Tuple

import numpy as np

LEVEL = 0.90
"""The nominal level of the predictive spread."""


@lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t distribution with ``df`` degrees of freedom.

    Computed through t = sqrt(df) * tan(u), under which the density is proportional to
    cos(u) ** (df - 1) on (-pi/2, pi/2) (exact for df = 1, the Cauchy distribution; within
    1e-6 of the tabulated values otherwise).

    Args:
        p (float): in (0, 1).
        df (int): >= 1.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be an int >= 1, got {df!r}")
    u = np.linspace(-math.pi / 2, math.pi / 2, 200_001)
    w = np.cos(u) ** (df - 1)
    cdf = np.concatenate([[0.0], np.cumsum((w[1:] + w[:-1]) / 2)])
    return float(math.sqrt(df) * math.tan(np.interp(p, cdf / cdf[-1], u)))


def interval_half_width(n: int, sd: float, level: float = LEVEL) -> float:
    """Half the width of :func:`prediction_interval` from ``n >= 2`` values of standard
    deviation ``sd``: ``t(level, n - 1) * sd * sqrt(1 + 1/n)``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"n must be an int >= 2 (one value has no spread), got {n!r}")
    return t_quantile((1 + level) / 2, n - 1) * sd * math.sqrt(1 + 1 / n)


def prediction_interval(
    values: Sequence[float], level: float = LEVEL
) -> Tuple[float, float] | None:
    """The two-sided Student-t prediction interval, at ``level``, for one new draw from the
    distribution of ``values`` (mean +- :func:`interval_half_width`), or None for fewer than two
    values (one recording says nothing of how runs differ).

    Args:
        values (sequence of float): one value per recording.
        level (float, default :data:`LEVEL`): in (0, 1).
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return None
    half = interval_half_width(int(x.size), float(np.std(x, ddof=1)), level)
    return float(x.mean() - half), float(x.mean() + half)


def predictive_spread(each: Sequence[float], jittered: tuple, top: float) -> Dict[str, Any]:
    """Where a run no recording saw should fall: ``low``, ``high`` and ``level``.

    From two or more recordings, the :data:`LEVEL` :func:`prediction_interval` of their exact
    replays ``each``, widened to hold ``jittered`` (the 5th and 95th percentile of jittered
    runs drawn across them) and clipped to ``[0, top]``. From one recording, ``jittered`` alone
    with ``level`` None: one recording is one sample of training and claims no level.

    Args:
        each (sequence of float): each recording's exact replay (jitter 0) of the metric.
        jittered (tuple of 2 floats): the jittered runs' 5-95% spread.
        top (float): the metric's largest value (1 for a share, the steps for a count).

    >>> predictive_spread([10.0], (8.0, 12.0), 100.0)
    {'low': 8.0, 'high': 12.0, 'level': None}
    >>> sorted(predictive_spread([10.0, 20.0], (9.0, 21.0), 100.0).items())[1]
    ('level', 0.9)
    """
    interval = prediction_interval(each)
    if interval is None:
        return {"low": jittered[0], "high": jittered[1], "level": None}
    low = max(0.0, min(interval[0], jittered[0]))
    return {"low": low, "high": min(top, max(interval[1], jittered[1])), "level": LEVEL}
