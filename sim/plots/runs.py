"""Policies compared on the summary metrics of simulated runs
(:class:`sim.replay.result.RunResult`); their scale trajectories are in
:mod:`sim.plots.trajectories`.

:func:`plot_policy_comparison` draws one metric of :func:`sim.replay.metrics.summarize` per
trace family and policy; :func:`plot_comparison_panels` several metrics. Conventions (``ax=``,
saving) are those of :mod:`sim.plots.common`, looks those of :mod:`sim.plots.style`.
"""

from __future__ import annotations

import math
from typing import Dict, List, Sequence, Union

import numpy as np
from matplotlib.figure import Figure

from sim.plots.common import DPI, legend_right, literal, new_axes
from sim.plots.style import policy_look
from sim.replay.metrics import METRICS
from sim.replay.result import RunResult

METRIC_LABELS = {n: m.label for n, m in METRICS.items() if m.per_run}
"""Axis labels of the per-run metrics, from :data:`sim.replay.metrics.METRICS`."""

METRIC_YSCALE = {"mean_flushed": "log", "signal_lost": "log", "final_scale": "log"}
"""Default y scale of :func:`plot_policy_comparison` per metric ("linear" when not listed)."""

LOWER_IS_BETTER = tuple(n for n in METRIC_LABELS if METRICS[n].lower_is_better)
"""Metrics whose titles say "lower is better"."""

SPREAD_NOTE = "dot: run average (as in the tables); bar: min to max over runs"
"""What the dots and bars of :func:`plot_policy_comparison` show (for RunResult input)."""


# ---------------------------------------------------------------- policy comparison


def plot_policy_comparison(
    rows: Sequence[Union[Dict[str, object], RunResult]],
    metric: str = "signal_lost",
    ax=None,
    yscale: Union[str, None] = None,
    title: Union[str, None] = None,
    figsize=(9.0, 4.5),
    legend: bool = True,
) -> Figure:
    """Dot plot: one group per trace family, one dot per policy, with its spread over runs.

    A dot is the run average of :func:`sim.replay.metrics.summarize`; for a RunResult a bar spans
    the smallest to the largest per-run value. A dot at 0 on a log axis is written as "0" at the
    bottom; a family where every policy is 0 is labelled "all 0".

    Args:
        rows (sequence of dict or RunResult): rows from :func:`sim.replay.metrics.summarize` (keys
            ``label``, ``trace`` and ``metric``) or results of :func:`sim.replay.run.simulate`.
        metric (str, default "signal_lost"): a key of :data:`METRIC_LABELS`.
        ax (Axes, optional), title (str, optional), figsize: as in :func:`plot_trajectory`.
        yscale (str, optional): "linear" or "log"; default :data:`METRIC_YSCALE`.
        legend (bool, default True): draw a legend of the policies on this axes.
    """
    if metric not in METRIC_LABELS:
        raise ValueError(f"metric must be one of {sorted(METRIC_LABELS)}, got {metric!r}")
    yscale = METRIC_YSCALE.get(metric, "linear") if yscale is None else yscale
    if yscale not in ("linear", "log"):
        raise ValueError(f"yscale must be 'linear', 'log' or None, got {yscale!r}")
    if not rows:
        raise ValueError("rows must hold at least one row, got none")
    points = _points(rows, metric)
    families = list(dict.fromkeys(f for f, _ in points))
    labels = list(dict.fromkeys(lab for _, lab in points))
    fig, ax = new_axes(ax, figsize)
    ax.set_yscale(yscale)
    x = np.arange(len(families))
    for j in range(len(labels)):
        _draw_policy(ax, points, families, labels, j, x, yscale)
    _mark_families(ax, points, families, labels, x)
    ax.set_xticks(x)
    ax.set_xticklabels(
        [literal(f) for f in families], rotation=20, ha="right", rotation_mode="anchor"
    )
    ax.set_xlim(-0.5, len(families) - 0.5)
    ax.set_xlabel("trace family")
    ax.set_ylabel(f"{METRIC_LABELS[metric].split(' (')[0]} ({yscale} axis)")
    better = ", lower is better" if metric in LOWER_IS_BETTER else ""
    ax.set_title(title if title is not None else f"{METRIC_LABELS[metric]}{better}")
    ax.grid(True, axis="y", which="major", alpha=0.3)
    if legend:
        note = "\n".join([*SPREAD_NOTE.split("; "), *coincide_notes(points, [metric])])
        legend_right(ax, title=note, title_fontsize="small")
    return fig


def _draw_policy(ax, points, families, labels, j: int, x, yscale: str) -> None:
    """The dots and bars of policy ``labels[j]`` over the ``families`` at ``x`` (its place in
    each group), a "0" at the bottom for a dot at 0 on a log axis."""
    label, width = labels[j], 0.8 / len(labels)
    bottom = ax.get_xaxis_transform()  # x in data, y in axes fraction
    v, lo, hi = np.array([points.get((f, label), (np.nan,) * 3) for f in families]).T
    xj = x + (j - (len(labels) - 1) / 2) * width
    look = policy_look(label, j)
    c = look.color
    shown = np.where((v > 0) | (yscale == "linear"), v, np.nan)
    ax.errorbar(
        xj,
        shown,
        yerr=np.maximum(np.array([v - lo, hi - v]), 0.0),  # a mean may round past them
        fmt=look.marker,
        color=c,
        ms=6,
        capsize=3,
        label=literal(label),
    )
    for xi, vi in zip(xj, v):
        if vi == 0 and yscale == "log":
            ax.text(xi, 0.01, "0", transform=bottom, color=c, ha="center", va="bottom")


def _mark_families(ax, points, families, labels, x) -> None:
    """A family where every policy is 0 labelled "all 0"; a line between the families."""
    bottom = ax.get_xaxis_transform()
    for i, f in enumerate(families):
        group = [points.get((f, lab), (np.nan,) * 3) for lab in labels]
        if all(hi == 0 for _, _, hi in group):
            ax.text(
                x[i],
                0.12,
                "all 0",
                transform=bottom,
                ha="center",
                va="bottom",
                bbox=dict(fc="white", ec="0.6", boxstyle="round"),
            )
        if i:
            ax.axvline(i - 0.5, color="0.85", lw=0.8)


def _points(rows, metric: str) -> Dict[tuple, tuple]:
    """(family, label) -> (run average, lowest, highest) of ``metric``."""
    points = {}
    for r in rows:
        if isinstance(r, RunResult):
            v = np.asarray(r.metrics[metric], dtype=np.float64)
            ok = v[np.isfinite(v)]
            lo, hi = (ok.min(), ok.max()) if ok.size else (math.nan, math.nan)
            points[(r.trace_name, r.label)] = (float(r.summary()[metric]), lo, hi)
        else:
            value = float(r[metric])
            points[(r["trace"], r["label"])] = (value, value, value)
    return points


def coincide_notes(rows_or_points, metrics: Sequence[str]) -> List[str]:
    """One line per group of policies whose dots and bars are equal in every family and
    every metric of ``metrics`` (drawn side by side so each stays visible)."""
    tables = (
        [rows_or_points]
        if isinstance(rows_or_points, dict)
        else [_points(rows_or_points, m) for m in metrics]
    )
    labels = list(dict.fromkeys(lab for _, lab in tables[0]))
    families = list(dict.fromkeys(f for f, _ in tables[0]))

    def key(label):
        return tuple(
            np.nan_to_num(t.get((f, label), (np.nan,) * 3)).tobytes()
            for t in tables
            for f in families
        )

    groups: Dict[tuple, List[str]] = {}
    for label in labels:
        groups.setdefault(key(label), []).append(label)
    return [
        f"{', '.join(g)}: equal in every family (dots side by side)"
        for g in groups.values()
        if len(g) > 1
    ]


def plot_comparison_panels(
    results: Sequence[Union[Dict[str, object], RunResult]],
    metrics: Sequence[str] = ("signal_lost", "skipped", "mean_flushed", "below_half_safe"),
    figsize=(14.0, 8.5),
) -> Figure:
    """:func:`plot_policy_comparison` for several metrics, two panels a row, one legend on top.

    Args:
        results (sequence of RunResult or dict): as ``rows`` of :func:`plot_policy_comparison`.
        metrics (sequence of str): keys of :data:`METRIC_LABELS`, one panel each.
        figsize (tuple, default (14, 8.5)): inches.
    """
    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    axes = np.atleast_1d(fig.subplots(math.ceil(len(metrics) / 2), min(len(metrics), 2)))
    for ax, metric in zip(axes.ravel(), metrics):
        plot_policy_comparison(results, metric, ax=ax, legend=False)
    handles, labels = axes.ravel()[0].get_legend_handles_labels()
    spread = any(isinstance(r, RunResult) for r in results)
    title = "; ".join(
        [f"policy ({SPREAD_NOTE})" if spread else "policy", *coincide_notes(results, metrics)]
    )
    fig.legend(handles, labels, loc="outside upper center", ncol=len(labels), title=title)
    return fig
