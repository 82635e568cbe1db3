"""The rule that picks the project's default settings from the report's sweeps."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Sequence

from updater.policy import DynamicScale, HeadroomScale

HEADROOM_MAX_MARGIN = 2.0
"""Largest margin eligible as HeadroomScale's default: a margin m lands a factor m below the
largest safe scale, and the policy's goal is to be within a factor 2 of it."""


def choose(
    rows: Sequence[Dict[str, Any]],
    defaults: Mapping[str, Any],
    tolerance: float = 0.05,
    tie: float = 0.03,
) -> Dict[str, Any]:
    """The rule used to pick defaults.

    Among rows whose mean loss (``lost_mean``) is within ``tolerance`` (relative) of the lowest,
    keep those whose worst-family loss (``lost_worst``) is within ``tie`` of the best worst,
    then those whose mean is within ``tie`` of the best mean among them; of these ties, pick
    the one closest to ``defaults`` (the current settings; distance: sum over settings of
    ``|log2(value / default)|``), then the lowest mean. So a setting moves only as far as the
    evidence pushes it.

    Args:
        rows (sequence of dict): one per setting, with its settings, ``lost_mean`` and
            ``lost_worst`` (:func:`sim.report.experiments.per_setting`); at least one.
        defaults (mapping): the current settings.
        tolerance (float, default 0.05), tie (float, default 0.03): relative margins.

    >>> rows = [{"a": 1, "lost_mean": 0.10, "lost_worst": 0.3},
    ...         {"a": 4, "lost_mean": 0.104, "lost_worst": 0.2}]
    >>> choose(rows, {"a": 1})["a"]  # within 5% of the best mean, with a better worst case
    4
    """
    best = min(r["lost_mean"] for r in rows)
    near = [r for r in rows if r["lost_mean"] <= best * (1 + tolerance)]
    worst = min(r["lost_worst"] for r in near)
    near = [r for r in near if r["lost_worst"] <= worst * (1 + tie)]
    best = min(r["lost_mean"] for r in near)
    near = [r for r in near if r["lost_mean"] <= best * (1 + tie)]

    def distance(r):
        return sum(abs(math.log2(r[k] / v)) for k, v in defaults.items() if k in r and r[k] > 0 < v)

    return min(near, key=lambda r: (distance(r), r["lost_mean"]))


def choose_defaults(
    dynamic_rows: List[Dict[str, Any]], headroom_rows: List[Dict[str, Any]]
) -> Dict[str, Dict[str, Any]]:
    """:func:`choose` applied to the DynamicScale sweep and to the HeadroomScale sweep (rows at
    one jitter), against the current defaults; margins above :data:`HEADROOM_MAX_MARGIN` are
    not eligible.

    Returns:
        dict with the chosen rows under ``"dynamic"`` and ``"headroom"``.
    """
    eligible = [r for r in headroom_rows if r["margin"] <= HEADROOM_MAX_MARGIN]
    return {
        "dynamic": choose(dynamic_rows, DynamicScale().settings()),
        "headroom": choose(eligible, HeadroomScale().settings()),
    }
