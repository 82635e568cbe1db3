"""Scale trajectories of simulated runs (:class:`sim.replay.result.RunResult`): the loss scale
against the step, with overflows, bad batches and the safe band.

:func:`plot_trajectory` draws one result on one axes; :func:`plot_trajectory_panels` draws
several results in stacked panels that share one y-range, one tick rule and one legend, and
merges results whose scale is the same at every step into one panel. Steps are 1-based. A
jumpy line is smoothed by one rule, :func:`smoothing_window`, which the figure states. Looks
come from :mod:`sim.plots.style`, files and axes from :mod:`sim.plots.common`.
"""

from __future__ import annotations

import math
import textwrap
from typing import List, Sequence, Union

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, MaxNLocator, MultipleLocator

from sim.plots.common import DPI, legend_right, literal, log2_ticks, new_axes
from sim.plots.style import BAD_BATCH, BAND_COLOR, OVERFLOW, SMOOTHING_SHARE, policy_look
from sim.replay.result import RunResult

OFFSET = 0.15
"""Policies whose scale coincides share a panel, each line shifted by this many binades."""

RUG_ABOVE = 40
"""A panel with more overflows than this draws them as a rug along its top, not as markers."""

TITLE_WIDTH = 120
"""A panel title wraps at this many characters (a 10-inch panel holds about 130)."""

MAX_TICKS = 9
"""At most this many y ticks: the tick step is the smallest power of two binades that keeps
them under it, the same for every panel of a figure."""


def smoothing_window(steps: int) -> int:
    """The rolling-median window of a run of ``steps`` steps: :data:`SMOOTHING_SHARE` of it,
    odd, at least 3.

    >>> smoothing_window(10000), smoothing_window(600)
    (101, 7)
    """
    return max(3, int(steps * SMOOTHING_SHARE) | 1)


def smoothing_note(steps: int, width: int = 0) -> str:
    """The sentence a figure states its smoothing with, wrapped at ``width`` characters (0:
    one line)."""
    note = (
        f"smoothing: a scale that changes on more than 1% of the steps is thin, its rolling "
        f"median over {SMOOTHING_SHARE:.0%} of the run ({smoothing_window(steps)} steps, fewer "
        "at the ends) thick"
    )
    return "\n".join(textwrap.wrap(note, width)) if width else note


def rolling_median(x: np.ndarray, window: int) -> np.ndarray:
    """Median of ``x`` over ``window`` steps centred on each step; near the ends, over the
    steps that exist (no padding, so the last value does not pull the line down)."""
    half = window // 2
    padded = np.pad(np.asarray(x, dtype=np.float64), half, constant_values=np.nan)
    return np.nanmedian(np.lib.stride_tricks.sliding_window_view(padded, window), axis=1)


def _jumpy(x: np.ndarray) -> bool:
    """True when ``x`` changes on more than 1% of the steps (and more than 20 times)."""
    return np.count_nonzero(np.diff(x)) > max(20, x.size // 100)


def _check_runs(result: RunResult, runs) -> List[int]:
    runs = list(runs)
    bad = [r for r in runs if not (isinstance(r, (int, np.integer)) and 0 <= r < result.runs)]
    if not runs or bad:
        raise ValueError(f"runs must be indices in [0, {result.runs}), got {runs!r}")
    return runs


def _cap_text(result: RunResult) -> str:
    cap = getattr(result.policy, "max_scale", None)
    if cap is None:
        return "safe band not capped (no max_scale)"
    return f"safe band capped at max_scale $2^{{{math.log2(cap):.0f}}}$"


def _draw(ax, results: Sequence[RunResult], run: int, window: int) -> List[str]:
    """Draw ``run`` of each result (they share one trace) with the first one's band and
    events; return notes for the title."""
    first = results[0]
    steps = np.arange(1, first.steps + 1)
    safe = np.log2(first.safe_scale[:, run])
    top = rolling_median(safe, window) if _jumpy(safe) else safe
    ax.fill_between(steps, top - 1, top, step="post", color=BAND_COLOR, lw=0, zorder=1)
    for i, r in enumerate(results):
        look = policy_look(r.label, i)
        s = np.log2(r.scale[:, run]) + OFFSET * (i - (len(results) - 1) / 2)
        if _jumpy(s):
            ax.step(steps, s, where="post", color=look.color, lw=0.4, alpha=0.7, zorder=2)
            ax.plot(
                steps, rolling_median(s, window), color=look.color, ls=look.ls, lw=2.2, zorder=3
            )
        else:
            ax.step(steps, s, where="post", color=look.color, ls=look.ls, lw=1.6, zorder=2 + i)
    s = np.log2(first.scale[:, run])
    ovf = np.flatnonzero(first.overflow[:, run])
    bad = np.flatnonzero(first.skipped[:, run] & ~first.overflow[:, run])
    if ovf.size > RUG_ABOVE:
        ax.vlines(
            steps[ovf],
            0.93,
            1.0,
            transform=ax.get_xaxis_transform(),
            color=OVERFLOW.color,
            lw=0.6,
            zorder=4,
        )
    elif ovf.size:
        ax.plot(
            steps[ovf], s[ovf], OVERFLOW.marker, color=OVERFLOW.color, ms=5, clip_on=False, zorder=5
        )
    if bad.size:
        ax.plot(
            steps[bad],
            s[bad],
            BAD_BATCH.marker,
            color=BAD_BATCH.color,
            ms=6,
            clip_on=False,
            zorder=5,
        )
    notes = [f"{ovf.size} overflows" + (" (rug at the top)" if ovf.size > RUG_ABOVE else "")]
    if len(results) > 1:
        notes.append(f"lines drawn {OFFSET:g} binade apart")
    if bad.size:
        notes.append(f"{bad.size} bad batches")
    return notes + [_cap_text(first)]


def _span(results: Sequence[RunResult], run: int) -> tuple:
    """The exponent range of the scales and safe bands of ``results``, two binades wide at
    least."""
    lows, highs = [], []
    for r in results:
        s, safe = np.log2(r.scale[:, run]), np.log2(r.safe_scale[:, run])
        lows += [s.min(), safe.min() - 1]
        highs += [s.max(), safe.max()]
    low, high = math.floor(min(lows)), math.ceil(max(highs))
    return (low - 1, high + 1) if high - low < 2 else (low - 0.5, high + 0.5)


def _style_axes(ax, span: tuple, steps: int) -> None:
    low, high = span
    tick = 2 ** max(0, math.ceil(math.log2(max(1.0, (high - low) / (MAX_TICKS - 1)))))
    ax.set_ylim(low, high)
    ax.yaxis.set_major_locator(MultipleLocator(tick))
    ax.yaxis.set_major_formatter(log2_ticks())
    ax.margins(x=0.01)  # room for the markers of step 1; steps are 1-based: no tick at 0
    ticks = MaxNLocator(nbins=6, integer=True).tick_values(1, max(steps, 2))
    ax.xaxis.set_major_locator(FixedLocator([t for t in ticks if 1 <= t <= steps]))
    ax.grid(True, which="major", alpha=0.3)


def _marker_handle(look, label: str) -> Line2D:
    """A legend entry of ``look``'s marker alone (no line)."""
    return Line2D([], [], ls="none", marker=look.marker, color=look.color, label=label)


def _legend_handles(results: Sequence[RunResult], jumpy: bool) -> list:
    handles = []
    for i, r in enumerate(results):
        look = policy_look(r.label, i)
        handles.append(Line2D([], [], color=look.color, ls=look.ls, lw=2, label=literal(r.label)))
    if jumpy:
        handles.append(Line2D([], [], color="0.3", lw=0.4, label="every step (thin)"))
    handles.append(Patch(color=BAND_COLOR, label="safe band [safe/2, safe]"))
    handles.append(_marker_handle(OVERFLOW, "overflow (skipped step)"))
    if any(np.any(r.skipped & ~r.overflow) for r in results):
        handles.append(_marker_handle(BAD_BATCH, "bad batch (skipped)"))
    return handles


def plot_trajectory(
    result: RunResult,
    runs: Sequence[int] = (0,),
    ax=None,
    title: Union[str, None] = None,
    figsize=(8.0, 4.5),
) -> Figure:
    """Loss scale against the 1-based step (2^k axis) with overflow and bad-batch markers and
    the safe band ``[safe/2, safe]`` of the first run shown (``safe``: the largest power-of-two
    scale that does not overflow at that step, capped at the policy's ``max_scale``; the title
    says whether it is capped).

    Overflows are markers, or a rug along the top when there are more than
    :data:`RUG_ABOVE`; a jumpy scale or safe band is smoothed by :func:`smoothing_window`. The
    legend sits right of the axes and states the smoothing.

    Args:
        result (RunResult): from :func:`sim.replay.run.simulate`.
        runs (sequence of int, default (0,)): which runs to draw, each in [0, result.runs);
            the band and events are those of the first.
        ax (Axes, optional): draw here; default a new figure.
        title (str, optional): default "<policy> on <trace>, run <r+1> of <runs>: <notes>".
        figsize (tuple, default (8, 4.5)): inches, for a new figure.
    """
    runs = _check_runs(result, runs)
    fig, ax = new_axes(ax, figsize)
    window = smoothing_window(result.steps)
    notes = _draw(ax, [result], runs[0], window)
    for i, r in enumerate(runs[1:], 1):
        look = policy_look("", i)
        ax.step(
            np.arange(1, result.steps + 1),
            np.log2(result.scale[:, r]),
            where="post",
            color=look.color,
            ls=look.ls,
            lw=1.2,
            zorder=3,
            label=f"run {r + 1}",
        )
    _style_axes(ax, _span([result], runs[0]), result.steps)
    which = ", ".join(str(r + 1) for r in runs)
    head = f"{literal(result.label)} on {literal(result.trace_name)}, run {which} of {result.runs}"
    ax.set_title(title if title is not None else f"{head}\n{'; '.join(notes)}", fontsize="medium")
    ax.set_xlabel("training step (1 = first)")
    ax.set_ylabel("loss scale")
    handles = _legend_handles([result], _jumpy(result.scale[:, runs[0]]))
    handles += [h for h in ax.get_lines() if not h.get_label().startswith("_")]
    smoothed = _jumpy(result.scale[:, runs[0]])
    legend_right(
        ax,
        handles=handles,
        title=smoothing_note(result.steps, 34) if smoothed else None,
        title_fontsize="small",
    )
    return fig


def plot_trajectory_panels(results: Sequence[RunResult], run: int = 0, figsize=None) -> Figure:
    """Run ``run`` of each result in stacked panels over a shared step axis.

    Results whose scale is the same at every step share one panel ("pytorch, dynamic: flat at
    2^15"), their lines :data:`OFFSET` binades apart (the title says so). Every panel has the
    same y-range and ticks; one legend above the panels names the policies, the events and
    the smoothing rule.

    Args:
        results (sequence of RunResult): e.g. every policy on one trace.
        run (int, default 0): which run of each result.
        figsize (tuple, optional): inches; default ``(10, 1.3 + 2.0 * panels)``.
    """
    if not results:
        raise ValueError("results must hold at least one RunResult, got none")
    for r in results:
        _check_runs(r, [run])
    groups: List[List[RunResult]] = []
    for r in results:
        same = [g for g in groups if np.array_equal(g[0].scale[:, run], r.scale[:, run])]
        (same[0].append(r) if same else groups.append([r]))
    fig = Figure(figsize=figsize or (10.0, 1.3 + 2.0 * len(groups)), dpi=DPI, layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(groups), 1, sharex=True, sharey=True))
    span = _span(results, run)
    window = smoothing_window(results[0].steps)
    for ax, group in zip(axes, groups):
        notes = _draw(ax, group, run, window)
        s = group[0].scale[:, run]
        names = ", ".join(literal(r.label) for r in group)
        if np.ptp(s) == 0:
            what = f"flat at $2^{{{math.log2(s[0]):.0f}}}$"
        else:
            what = "the same scale at every step" if len(group) > 1 else ""
        text = f"{names}{': ' + what if what else ''} ({'; '.join(notes)})"
        ax.set_title(textwrap.fill(text, TITLE_WIDTH), fontsize="medium", loc="left")
        ax.set_ylabel("loss scale")
        _style_axes(ax, span, group[0].steps)
    axes[-1].set_xlabel("training step (1 = first)")
    jumpy = any(_jumpy(r.scale[:, run]) for r in results)
    r0 = results[0]
    head = f"Loss scale on {r0.trace_name}, run {run + 1} of {r0.runs} of each policy"
    title = f"{head}\n{smoothing_note(r0.steps)}" if jumpy else head
    fig.legend(
        handles=_legend_handles(results, jumpy),
        loc="outside upper center",
        ncol=5,
        fontsize="small",
        title=title,
        title_fontsize="small",
    )
    return fig
