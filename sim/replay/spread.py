"""The predictive spread: where the value of a run no recording saw should fall.

Two rules live here. :func:`calibrated_interval` is what ``dls simulate`` and ``dls tune`` print
(:mod:`sim.replay.intervals`): the variation of a metric within the recordings
(:mod:`sim.replay.bootstrap`) times a factor calibrated on the shipped models' batch orders
(:data:`CALIBRATED`), so that one or two recordings give a usable interval. The Student-t rule
below it is what the report's predictions (:mod:`sim.replay.predictions`) still use.

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
from statistics import NormalDist
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


CALIBRATED = {"skipped": (2.790, LEVEL), "below_half_safe": (11.097, 0.85)}
"""Per metric, ``(factor, level)``: how many times wider than the within-recording variation
(the block bootstrap's standard deviation) the values of other batch orders spread, and the
level the interval holds with it. The factor is the :data:`LEVEL` quantile of
``|other - predicted| / (z * sd)`` over the shipped models' recordings, each predicting the
others' exact replay under a grid of policies; where more than ``1 - LEVEL`` of them lie beyond
every factor (the bootstrap of one recording shows no variation at all where another batch order
moved), the factor holds all the others and the level is the share it holds
(:func:`calibration_factor`). Made and checked by ``python -m benchmarks.bench_interval``
(reports/interval.md), to three decimals: the skipped steps held 90% of 28 cases; the
below-half share 85% (on sequence_lstm one recording's replays under DynamicScale spend 0% of
steps below half the safe scale in every draw, the other batch order's 5.3-74.6%)."""


def spread_sd(values: Sequence[float], drawn: Sequence[float], unit: float) -> float:
    """The within-recording standard deviation of a metric: that of its bootstrapped values
    ``drawn``, at least half a ``unit`` (a count is known to one step at best) unless every
    value of ``values`` and ``drawn`` is 0 (no step overflowed at any scale the policy chose, in
    any recording or draw: then 0)."""
    every = np.concatenate([np.asarray(values, float), np.asarray(drawn, float)])
    if not np.any(every != 0):
        return 0.0
    return max(float(np.std(np.asarray(drawn, float), ddof=1)), unit / 2)


def calibrated_interval(
    values: Sequence[float], drawn: Sequence[float], factor: float, unit: float, top: float
) -> Tuple[float, float]:
    """The interval of a metric in a batch order no recording saw, at the level ``factor`` was
    calibrated to (:data:`CALIBRATED`).

    Centred on the mean of the recordings' exact replays ``values``; its half-width is
    ``z * sd * sqrt(1 + 1/n)`` (``z`` the normal quantile of :data:`LEVEL`, ``n`` recordings)
    with ``sd`` the larger of ``factor`` times :func:`spread_sd` and the recordings' own standard
    deviation (two or more); widened outward to whole ``unit`` and clipped to ``[0, top]``.
    Recordings that agree (a tie) keep the bootstrap's width.

    Args:
        values (sequence of float): each recording's exact replay, at least one.
        drawn (sequence of float): the metric over bootstrapped recordings, at least two.
        factor (float): the calibrated factor (:data:`CALIBRATED`), >= 0.
        unit (float): the metric's step (1 for a count, 1/steps for a share), > 0.
        top (float): the metric's largest value.

    >>> calibrated_interval([15.0, 15.0], [14.0, 15.0, 16.0, 15.0], 2.0, 1.0, 100.0)
    (11.0, 19.0)
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size < 1 or len(drawn) < 2:
        raise ValueError(
            f"values needs at least 1 and drawn at least 2 entries, got {x.size} and {len(drawn)}"
        )
    if not factor >= 0 or not unit > 0:
        raise ValueError(f"factor must be >= 0 and unit > 0, got {factor} and {unit}")
    sd = factor * spread_sd(x, drawn, unit)
    if x.size > 1:
        sd = max(sd, float(np.std(x, ddof=1)))
    half = NormalDist().inv_cdf((1 + LEVEL) / 2) * sd * math.sqrt(1 + 1 / x.size)
    low = math.floor(round((x.mean() - half) / unit, 9)) * unit
    high = math.ceil(round((x.mean() + half) / unit, 9)) * unit
    return max(0.0, low), min(top, high)


def calibration_factor(cases: Sequence[Dict[str, Any]]) -> Tuple[float, float]:
    """The smallest factor whose :func:`calibrated_interval` from one recording holds the
    :data:`LEVEL` share of ``cases`` (before rounding to whole units), and that level: the
    ``ceil(LEVEL * (N + 1))``-th smallest of ``|target - value| / (z * sd * sqrt(2))``; where
    that is infinite (``sd`` 0 and the target elsewhere), the largest finite one and the share
    of cases it holds, rounded down to a percent.

    Args:
        cases (sequence of dict): ``value`` (one recording's exact replay), ``drawn`` (its
            bootstrapped values), ``target`` (another batch order's value) and ``unit``.
    """
    if not cases:
        raise ValueError("cases must hold at least one case, got none")
    z = NormalDist().inv_cdf((1 + LEVEL) / 2) * math.sqrt(2)
    scores = []
    for c in cases:
        sd = spread_sd([c["value"]], c["drawn"], c["unit"])
        gap = abs(c["target"] - c["value"])
        scores.append(0.0 if gap == 0 else (math.inf if sd == 0 else gap / (z * sd)))
    scores = np.sort(scores)
    rank = min(len(scores), math.ceil(LEVEL * (len(scores) + 1)))
    if math.isfinite(scores[rank - 1]):
        return float(scores[rank - 1]), LEVEL
    finite = scores[np.isfinite(scores)]
    held = math.floor(100 * finite.size / scores.size) / 100
    return (float(finite[-1]) if finite.size else 0.0), held
