"""The rule that picks the project's default settings from the report's sweeps."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Sequence

import numpy as np

from updater.policy import DynamicScale, HeadroomScale

DYNAMIC_GRID = {
    "init_scale": (2.0**10, 2.0**15),
    "growth_interval": (250, 500, 1000, 2000, 4000),
    "hysteresis": (1, 2, 3),
}
HEADROOM_GRID = {
    "margin": (1.0, 2.0, 4.0, 8.0),
    "backoff_factor": (0.5, 2.0**-8),
}
"""The settings the report sweeps (and ``dls tune`` on a user's traces)."""

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
            ``lost_worst`` (:func:`per_setting`); at least one.
        defaults (mapping): the current settings.
        tolerance (float, default 0.05), tie (float, default 0.03): relative margins.

    >>> rows = [{"a": 1, "lost_mean": 0.10, "lost_worst": 0.3},
    ...         {"a": 4, "lost_mean": 0.104, "lost_worst": 0.2}]
    >>> choose(rows, {"a": 1})["a"]  # within 5% of the best mean, with a better worst case
    4
    """
    near = tied(rows, tolerance, tie)

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


def per_setting(
    rows: Sequence[Dict[str, Any]], keys: Sequence[str], families=None
) -> List[Dict[str, Any]]:
    """Fold :func:`sim.replay.sweep.run_sweep` rows (one per trace and setting) into one row per
    setting: the settings, ``lost_<family>`` per family, ``lost_mean``, ``lost_worst``,
    ``skipped_mean`` and ``flushed_mean`` (means over families), ``flush_<family>`` (what the
    family's figure rests on: its :data:`EVIDENCE`) and the means of :data:`FLUSH_MEANS`.
    ``families`` (optional) keeps only the rows of those traces."""
    groups: Dict[tuple, Dict[str, Dict[str, Any]]] = {}
    for r in rows:
        if families is not None and r["trace"] not in families:
            continue
        groups.setdefault(tuple(r[k] for k in keys), {})[r["trace"]] = r
    out = []
    for values, by_family in groups.items():
        row: Dict[str, Any] = dict(zip(keys, values))
        lost = {f: r["signal_lost"] for f, r in by_family.items()}
        for f, v in lost.items():
            row[f"lost_{f}"] = v
            row[f"flush_{f}"] = {k: by_family[f][k] for k in EVIDENCE if k in by_family[f]}
        row["lost_mean"] = float(np.mean(list(lost.values())))
        row["lost_worst"] = float(max(lost.values()))
        row["skipped_mean"] = float(np.mean([r["skipped"] for r in by_family.values()]))
        row["flushed_mean"] = float(np.nanmean([r["mean_flushed"] for r in by_family.values()]))
        row.update(_flush_means(list(by_family.values())))
        out.append(row)
    return out


FLUSH_MEANS = (
    "signal_lost_low",
    "signal_lost_high",
    "mean_flushed_low",
    "mean_flushed_high",
    "flush_unmeasured",
    "flush_exact_beyond",
    "flush_unmeasured_lost",
)
"""Summary columns of what the flushed shares rest on (:mod:`sim.replay.flush_basis`) that
:func:`per_setting` averages over families."""

EVIDENCE = ("signal_lost", "mean_flushed", *FLUSH_MEANS, "flush_basis")
"""A summary row's columns that say what its signal lost rests on, kept per family by
:func:`per_setting` (``flush_<family>``) so a table can print each family's bounds."""


def _flush_means(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Over one setting's rows (one per family): the means of :data:`FLUSH_MEANS`, the
    ``signal_lost`` they bound (``lost_mean``) and the flush bases met (``flush_basis``)."""
    if not all("flush_basis" in r for r in rows):
        return {}
    out: Dict[str, Any] = {k: _mean([r[k] for r in rows]) for k in FLUSH_MEANS}
    out["signal_lost"] = float(np.mean([r["signal_lost"] for r in rows]))
    kinds = {k for r in rows for k in r["flush_basis"].split("+")}
    out["flush_basis"] = "+".join(sorted(kinds))
    return out


def _mean(values) -> float:
    """The mean of the values that are not NaN (NaN when none is)."""
    v = np.asarray(values, dtype=np.float64)
    return float(v[~np.isnan(v)].mean()) if (~np.isnan(v)).any() else float("nan")


def tied(
    rows: Sequence[Dict[str, Any]], tolerance: float = 0.05, tie: float = 0.03
) -> List[Dict[str, Any]]:
    """The rows :func:`choose` cannot tell apart by their losses (its arguments): within
    ``tolerance`` of the lowest mean, ``tie`` of the best worst case among them, then ``tie``
    of the best mean among those; :func:`choose` picks the one nearest the defaults.

    >>> rows = [{"lost_mean": 0.1, "lost_worst": 0.2}, {"lost_mean": 0.101, "lost_worst": 0.2},
    ...         {"lost_mean": 0.3, "lost_worst": 0.4}]
    >>> len(tied(rows))
    2
    """
    best = min(r["lost_mean"] for r in rows)
    near = [r for r in rows if r["lost_mean"] <= best * (1 + tolerance)]
    worst = min(r["lost_worst"] for r in near)
    near = [r for r in near if r["lost_worst"] <= worst * (1 + tie)]
    best = min(r["lost_mean"] for r in near)
    return [r for r in near if r["lost_mean"] <= best * (1 + tie)]
