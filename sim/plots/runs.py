"""Figures of simulated runs (:class:`sim.replay.result.RunResult`): the loss scale against the
step, and policies compared on summary metrics.

:func:`plot_trajectory` draws one result's scale with its overflows, skips and safe band;
:func:`plot_trajectory_panels` stacks several. :func:`plot_policy_comparison` draws one metric
of :func:`sim.replay.metrics.summarize` per trace family and policy; :func:`plot_comparison_panels`
several metrics. Conventions (``ax=``, saving, colours) are those of :mod:`sim.plots.common`.
"""

from __future__ import annotations

import math
from typing import Dict, Sequence, Union

import numpy as np
from matplotlib.figure import Figure

from sim.plots.common import (
    DPI,
    cycle_color,
    legend_note,
    legend_right,
    new_axes,
    pow2_label,
)
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


# ---------------------------------------------------------------- helpers


def _rolling_median(x: np.ndarray, window: int) -> np.ndarray:
    padded = np.pad(x, window // 2, mode="edge")
    return np.median(np.lib.stride_tricks.sliding_window_view(padded, window), axis=1)


def _jumpy(x: np.ndarray) -> bool:
    """True when ``x`` changes on more than 1% of the steps (and more than 20 times)."""
    return np.count_nonzero(np.diff(x)) > max(20, x.size // 100)


# ---------------------------------------------------------------- trajectories


def plot_trajectory(
    result: RunResult,
    runs: Sequence[int] = (0,),
    ax=None,
    title: Union[str, None] = None,
    figsize=(8.0, 4.5),
    note: Union[str, None] = None,
) -> Figure:
    """Loss scale against step (log2 axis) with overflow and skip markers and the safe band.

    The band spans ``[safe / 2, safe]`` for the first run shown, where ``safe`` is the largest
    power-of-two scale that does not overflow at that step, capped at the policy's
    ``max_scale`` when it has one (the legend says which). A scale that changes on more than
    1% of the steps (and more than 20 times) is drawn thin, with its rolling median over about
    1% of the steps on top;
    such a ``safe`` is drawn as its rolling median. Markers are not clipped at the edges. The
    legend sits right of the axes and notes a flat scale, a flat band and coinciding runs.

    Args:
        result (RunResult): from :func:`sim.replay.run.simulate`.
        runs (sequence of int, default (0,)): which runs to draw, each in [0, result.runs).
        ax (Axes, optional): draw here; default a new figure.
        title (str, optional): default "<policy> on <trace>".
        figsize (tuple, default (8, 4.5)): inches, for a new figure.
        note (str, optional): one more line for the legend.
    """
    runs = list(runs)
    bad = [r for r in runs if not (isinstance(r, (int, np.integer)) and 0 <= r < result.runs)]
    if not runs or bad:
        raise ValueError(f"runs must be indices in [0, {result.runs}), got {runs!r}")
    fig, ax = new_axes(ax, figsize)
    n = result.steps
    steps = np.arange(n)
    first = runs[0]
    safe = result.safe_scale[:, first]
    cap = getattr(result.policy, "max_scale", None)
    window = max(3, n // 100 | 1)
    band = "safe band [safe/2, safe]"
    band_top = safe
    if _jumpy(safe):
        band_top = _rolling_median(safe, window)
        band += f",\nsafe: rolling median of {window} steps"
    capped = (
        f"capped at max_scale {pow2_label(cap)}" if cap is not None else "no max_scale: not capped"
    )
    ax.fill_between(
        steps,
        band_top / 2,
        band_top,
        step="post",
        color="tab:green",
        alpha=0.2,
        lw=0,
        label=f"{band}\n({capped})",
    )
    for i, r in enumerate(runs):
        s = result.scale[:, r]
        c = cycle_color(i)
        name = f"scale, run {r}" if len(runs) > 1 else "scale"
        if _jumpy(s):
            ax.step(steps, s, where="post", color=c, lw=0.4, alpha=0.6, label=f"{name} (each step)")
            ax.plot(
                steps,
                _rolling_median(s, window),
                color=c,
                lw=1.8,
                label=f"{name}: rolling median\nof {window} steps",
            )
        else:
            ax.step(steps, s, where="post", color=c, lw=1.2, label=name)
    s = result.scale[:, first]
    ovf = np.flatnonzero(result.overflow[:, first])
    bad_batch = np.flatnonzero(result.skipped[:, first] & ~result.overflow[:, first])
    if ovf.size:
        ax.plot(
            ovf,
            s[ovf],
            "v",
            color="tab:red",
            ms=5,
            clip_on=False,
            zorder=4,
            label=f"overflow ({ovf.size})",
        )
    if bad_batch.size:
        ax.plot(
            bad_batch,
            s[bad_batch],
            "x",
            color="black",
            ms=6,
            clip_on=False,
            zorder=4,
            label=f"skipped: bad batch ({bad_batch.size})",
        )
    if len(runs) > 1 and all(np.array_equal(result.scale[:, r], s) for r in runs):
        legend_note(ax, f"runs {', '.join(map(str, runs))} coincide")
    if np.ptp(s) == 0:
        legend_note(ax, f"scale flat at {pow2_label(s[0])}, all {n} steps")
    if np.ptp(safe) == 0:
        legend_note(
            ax,
            f"safe scale flat at {pow2_label(safe[0])}"
            + (" = max_scale" if safe[0] == cap else ""),
        )
    if note:
        legend_note(ax, note)
    ax.set_yscale("log", base=2)
    ax.margins(x=0.01)
    low, high = ax.get_ylim()
    if high < 4 * low:  # show at least two binades around a flat line
        ax.set_ylim(low / 2, high * 2)
    ax.set_xlabel("training step")
    ax.set_ylabel("loss scale (log2 axis)")
    ax.set_title(title if title is not None else f"{result.label} on {result.trace_name}")
    ax.grid(True, which="major", alpha=0.3)
    legend_right(ax, framealpha=0.85)
    return fig


def plot_trajectory_panels(results: Sequence[RunResult], figsize=None) -> Figure:
    """Run 0 of each result in its own panel, stacked over a shared step axis.

    A panel whose run 0 has the same scale at every step as an earlier panel's says so.

    Args:
        results (sequence of RunResult): e.g. every policy on one trace.
        figsize (tuple, optional): inches; default ``(11, 2.4 * len(results))``.
    """
    if not results:
        raise ValueError("results must hold at least one RunResult, got none")
    fig = Figure(figsize=figsize or (11.0, 2.4 * len(results)), dpi=DPI, layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(results), 1, sharex=True))
    for i, (ax, r) in enumerate(zip(axes, results)):
        same = [q.label for q in results[:i] if np.array_equal(q.scale[:, 0], r.scale[:, 0])]
        plot_trajectory(
            r,
            ax=ax,
            title=f"{r.label} on {r.trace_name} (run 0)",
            note=f"same scale at every step\nas {same[0]}" if same else None,
        )
        ax.set_xlabel("")
    axes[-1].set_xlabel("training step")
    return fig


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
    points = {}  # (family, label) -> (value, lowest, highest)
    for r in rows:
        if isinstance(r, RunResult):
            v = np.asarray(r.metrics[metric], dtype=np.float64)
            ok = v[np.isfinite(v)]
            lo, hi = (ok.min(), ok.max()) if ok.size else (math.nan, math.nan)
            points[(r.trace_name, r.label)] = (float(r.summary()[metric]), lo, hi)
        else:
            value = float(r[metric])
            points[(r["trace"], r["label"])] = (value, value, value)
    families = list(dict.fromkeys(f for f, _ in points))
    labels = list(dict.fromkeys(lab for _, lab in points))
    fig, ax = new_axes(ax, figsize)
    ax.set_yscale(yscale)
    width = 0.8 / len(labels)
    x = np.arange(len(families))
    bottom = ax.get_xaxis_transform()  # x in data, y in axes fraction
    for j, label in enumerate(labels):
        v, lo, hi = np.array([points.get((f, label), (np.nan,) * 3) for f in families]).T
        xj = x + (j - (len(labels) - 1) / 2) * width
        c = cycle_color(j)
        shown = np.where((v > 0) | (yscale == "linear"), v, np.nan)
        ax.errorbar(
            xj,
            shown,
            yerr=np.maximum(np.array([v - lo, hi - v]), 0.0),  # a mean may round past them
            fmt="o",
            color=c,
            ms=5,
            capsize=3,
            label=label,
        )
        for xi, vi in zip(xj, v):
            if vi == 0 and yscale == "log":
                ax.text(xi, 0.01, "0", transform=bottom, color=c, ha="center", va="bottom")
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
    ax.set_xticks(x)
    ax.set_xticklabels(families, rotation=20, ha="right", rotation_mode="anchor")
    ax.set_xlim(-0.5, len(families) - 0.5)
    ax.set_xlabel("trace family")
    ax.set_ylabel(f"{METRIC_LABELS[metric].split(' (')[0]} ({yscale} axis)")
    better = ", lower is better" if metric in LOWER_IS_BETTER else ""
    ax.set_title(title if title is not None else f"{METRIC_LABELS[metric]}{better}")
    ax.grid(True, axis="y", which="major", alpha=0.3)
    if legend:
        legend_right(ax, title=SPREAD_NOTE.replace("; ", "\n"), title_fontsize="small")
    return fig


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
    fig.legend(
        handles,
        labels,
        loc="outside upper center",
        ncol=len(labels),
        title=f"policy ({SPREAD_NOTE})" if spread else "policy",
    )
    return fig
