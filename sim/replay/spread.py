"""The predictive interval: where the value of a run no recording saw should fall.

One rule, :func:`calibrated_interval`, is what ``dls simulate``, ``dls tune``
(:mod:`sim.replay.intervals`) and the report's predictions (:mod:`sim.replay.predictions`)
print: the variation of a metric within the recordings (:mod:`sim.replay.bootstrap`) times a
factor calibrated on the shipped models' batch orders (:data:`CALIBRATED`,
:func:`calibration_factor`), so that one or two recordings give a usable interval.

A recording is one sample of training; a real run under another policy, in another batch order,
is another sample. Re-drawing stretches of a recording shows how much a policy's count moves
when the steps do; what differs between whole batch orders beyond that is the factor. With two
or more recordings their own disagreement is a floor of the spread.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Dict, Sequence, Tuple

import numpy as np

LEVEL = 0.90
"""The nominal level of the predictive interval."""


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
