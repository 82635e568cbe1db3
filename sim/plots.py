"""Matplotlib figures for the simulator.

Every function builds :class:`matplotlib.figure.Figure` objects directly: no pyplot and no
backend switch, so importing this module leaves the user's matplotlib session alone. Each plot
function takes ``ax=None``: it draws on ``ax`` when given, otherwise on a new figure of
``figsize`` inches at :data:`DPI`, and returns the figure. :func:`save_figure` writes the format
named by the file's extension; :func:`check_figure_path` checks a path before any work.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Dict, List, Mapping, Sequence, Union

import matplotlib as mpl
import numpy as np
from matplotlib.backend_bases import FigureCanvasBase
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from sim.fp16 import representable_window, sweep
from sim.run import RunResult
from sim.traces import EXP_MIN, NBINS, Trace
from sim.underflow import pooled_flushed_share
from updater.float16 import FP16_OVERFLOW

DPI = 100
"""Dots per inch of new figures and of :func:`save_figure`."""

METRIC_LABELS = {
    "overflows": "overflows per run",
    "skipped": "skipped steps per run",
    "mean_flushed": "share of nonzero values flushed (applied steps)",
    "signal_lost": "share of gradient values lost (skips + underflow)",
    "steps_to_safe": "steps until within 2x of the safe scale (median)",
    "below_half_safe": "share of steps below half the safe scale",
    "final_scale": "final scale (median)",
}
"""Axis labels for the metrics of :func:`sim.run.summarize`."""

METRIC_YSCALE = {"mean_flushed": "log", "signal_lost": "log", "final_scale": "log"}
"""Default y scale of :func:`plot_policy_comparison` per metric ("linear" when not listed)."""

LOWER_IS_BETTER = (
    "overflows",
    "skipped",
    "mean_flushed",
    "signal_lost",
    "steps_to_safe",
    "below_half_safe",
)
"""Metrics whose titles say "lower is better"."""

SCALE_COLORS = (
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:red",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
)
"""Colours of loss scales: scale ``2**k`` always gets ``SCALE_COLORS[k % 9]``."""

_NO_VERSION = {
    "png": {"Software": None},
    "pdf": {"Creator": None, "Producer": None, "CreationDate": None},
    "svg": {"Creator": None, "Date": None},
}


# ---------------------------------------------------------------- saving


def figure_formats() -> List[str]:
    """File extensions :func:`save_figure` accepts: the formats the installed matplotlib
    writes (``pgf`` only when its TeX program is on PATH)."""
    tex = shutil.which(mpl.rcParams["pgf.texsystem"])
    return sorted(f for f in FigureCanvasBase.get_supported_filetypes() if f != "pgf" or tex)


def check_figure_path(path: Union[str, Path]) -> str:
    """Check a figure path before doing the work that makes the figure; return its format.

    Args:
        path (str or Path): output file; its extension (any case) names the format, one of
            :func:`figure_formats` (png, pdf, svg, jpg, ...); its folder must exist.

    Returns:
        str: the format, the extension in lower case without the dot.

    Raises:
        TypeError: ``path`` is not a str or Path.
        ValueError: no extension, one matplotlib cannot write, or a missing folder.

    >>> check_figure_path("traj.PDF")
    'pdf'
    """
    if not isinstance(path, (str, Path)):
        raise TypeError(f"figure path must be a str or Path, got {type(path).__name__}")
    path = Path(path)
    formats = figure_formats()
    fmt = path.suffix[1:].lower()
    if not fmt:
        raise ValueError(
            f"figure path {str(path)!r} has no extension; add one of: {', '.join(formats)}"
        )
    if fmt not in formats:
        raise ValueError(
            f"figure path {str(path)!r}: cannot write {path.suffix!r} files; "
            f"use one of: {', '.join(formats)}"
        )
    if not path.parent.is_dir():
        raise ValueError(f"figure path {str(path)!r}: folder {str(path.parent)!r} does not exist")
    return fmt


def save_figure(fig: Figure, path: Union[str, Path], dpi: int = DPI) -> Path:
    """Write ``fig`` in the format of ``path``'s extension (see :func:`check_figure_path`).

    PNG, PDF and SVG files carry no matplotlib version, so a rerun writes the same PNG bytes.

    Args:
        fig (Figure): the figure.
        path (str or Path): output file, e.g. ``traj.png``, ``traj.pdf``, ``traj.svg``.
        dpi (int, default 100): dots per inch; a raster image is ``figsize * dpi`` pixels.
    """
    fmt = check_figure_path(path)
    fig.savefig(path, dpi=dpi, format=fmt, metadata=_NO_VERSION.get(fmt))
    return Path(path)


# ---------------------------------------------------------------- helpers


def _axes(ax, figsize):
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    return fig, fig.add_subplot()


def _is_pow2(x: float) -> bool:
    return x > 0 and math.isfinite(x) and math.log2(x) == int(math.log2(x))


def _pow2(x: float) -> str:
    """``2^k`` (mathtext) for a power of two, else ``%g``."""
    return f"$2^{{{int(math.log2(x))}}}$" if _is_pow2(x) else f"{x:g}"


def scale_color(scale: float) -> str:
    """The fixed colour of a loss scale (nearest power of two), the same in every figure."""
    return SCALE_COLORS[round(math.log2(scale)) % len(SCALE_COLORS)]


def _color(i: int) -> str:
    """The ``i``-th colour of the current property cycle."""
    colors = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
    return colors[i % len(colors)]


def _note(ax, text: str) -> None:
    """A legend line without a symbol."""
    ax.plot([], [], " ", label=text)


def _rolling_median(x: np.ndarray, window: int) -> np.ndarray:
    padded = np.pad(x, window // 2, mode="edge")
    return np.median(np.lib.stride_tricks.sliding_window_view(padded, window), axis=1)


def _jumpy(x: np.ndarray) -> bool:
    """True when ``x`` changes on more than 1% of the steps (and more than 20 times)."""
    return np.count_nonzero(np.diff(x)) > max(20, x.size // 100)


def _legend_right(ax, **kw):
    return ax.legend(
        loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, fontsize="small", **kw
    )


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
        result (RunResult): from :func:`sim.run.simulate`.
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
    fig, ax = _axes(ax, figsize)
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
    capped = f"capped at max_scale {_pow2(cap)}" if cap is not None else "no max_scale: not capped"
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
        c = _color(i)
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
        _note(ax, f"runs {', '.join(map(str, runs))} coincide")
    if np.ptp(s) == 0:
        _note(ax, f"scale flat at {_pow2(s[0])}, all {n} steps")
    if np.ptp(safe) == 0:
        _note(
            ax, f"safe scale flat at {_pow2(safe[0])}" + (" = max_scale" if safe[0] == cap else "")
        )
    if note:
        _note(ax, note)
    ax.set_yscale("log", base=2)
    ax.margins(x=0.01)
    low, high = ax.get_ylim()
    if high < 4 * low:  # show at least two binades around a flat line
        ax.set_ylim(low / 2, high * 2)
    ax.set_xlabel("training step")
    ax.set_ylabel("loss scale (log2 axis)")
    ax.set_title(title if title is not None else f"{result.label} on {result.trace_name}")
    ax.grid(True, which="major", alpha=0.3)
    _legend_right(ax, framealpha=0.85)
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


# ---------------------------------------------------------------- histograms


def plot_histogram(
    trace: Trace,
    step: Union[int, None] = None,
    scales: Sequence[float] = (1.0, 8.0, 2.0**15),
    ax=None,
    title: Union[str, None] = None,
    figsize=(8.0, 5.0),
) -> Figure:
    """Gradient-magnitude histogram by binade, with float16's representable window at several
    scales.

    Bars give each binade's share of ALL values (exact zeros included in the total, shown in
    the legend). For each scale ``s`` the window ``[2**-24 / s, 65504 / s]`` of unscaled
    magnitudes that stay nonzero and finite is drawn as a bracket in the scale's fixed colour
    (:func:`scale_color`); values left of it flush to zero, values right of it overflow. The
    legend sits below the axes.

    Args:
        trace (Trace): the trace.
        step (int, optional): one step to show; default all steps pooled.
        scales (sequence of float, default (1, 8, 2**15)): loss scales to draw windows for.
        ax, title: as in :func:`plot_trajectory`.
        figsize (tuple, default (8, 5)): inches, for a new figure.
    """
    if step is None:
        counts, zeros = trace.counts.sum(axis=0), int(trace.zeros.sum())
    else:
        if not (isinstance(step, (int, np.integer)) and 0 <= step < trace.steps):
            raise ValueError(f"step must be an int in [0, {trace.steps}), got {step!r}")
        counts, zeros = trace.counts[step], int(trace.zeros[step])
    total = counts.sum() + zeros
    if total == 0:
        raise ValueError("trace has no values to plot (all counts and zeros are 0)")
    fig, ax = _axes(ax, figsize)
    binades = np.arange(NBINS) + EXP_MIN
    share = counts / total
    used = np.flatnonzero(counts)
    lo_b, hi_b = (binades[used[0]], binades[used[-1]]) if used.size else (-30, 0)
    ax.bar(
        binades,
        share,
        width=1.0,
        align="edge",
        color="0.6",
        label=f"nonzero values (exact zeros: {zeros / total:.1%} of all)",
    )
    ax.set_yscale("log")
    positive = share[share > 0]
    ymin = positive.min() / 3 if positive.size else 1e-6
    ymax = positive.max() if positive.size else 1.0
    ax.set_ylim(ymin, ymax * (ymax / ymin) ** 0.4)  # bars fill the lower ~70%
    ax.yaxis.set_major_formatter(
        FuncFormatter(lambda v, _: "" if v > 1.0 else f"$10^{{{math.log10(v):.0f}}}$")
    )
    for i, s in enumerate(scales):
        lo, hi = representable_window(s)
        c = scale_color(s)
        y = 0.95 - 0.06 * i
        ax.annotate(
            "",
            xy=(math.log2(lo), y),
            xytext=(math.log2(hi), y),
            xycoords=("data", "axes fraction"),
            textcoords=("data", "axes fraction"),
            arrowprops=dict(arrowstyle="|-|", color=c, lw=1.5, shrinkA=0, shrinkB=0),
        )
        ax.axvline(math.log2(lo), color=c, ls="--", lw=1.0)
        top = f"65504$\\cdot${_pow2(1 / s)}" if _is_pow2(s) else f"{hi:.4g}"
        ax.plot([], [], color=c, lw=1.5, label=f"scale {_pow2(s)}: [{_pow2(lo)}, {top}]")
    xmin = min(lo_b, *(math.log2(representable_window(s)[0]) for s in scales)) - 2
    xmax = max(hi_b + 1, *(math.log2(representable_window(s)[1]) for s in scales)) + 2
    ax.set_xlim(xmin, xmax)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"$2^{{{v:.0f}}}$"))
    ax.set_xlabel("|gradient|, unscaled (log2 axis)")
    ax.set_ylabel("share of all values (log scale)")
    where = "all steps" if step is None else f"step {step}"
    ax.set_title(title if title is not None else f"{trace.name}: gradient magnitudes, {where}")
    ax.grid(True, axis="y", which="major", alpha=0.3)
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncol=2,
        fontsize="small",
        title="float16 keeps |gradient| nonzero and finite in [$2^{-24}$, 65504] / scale",
        title_fontsize="small",
    )
    return fig


# ---------------------------------------------------------------- underflow against scale


def underflow_curve(source, exponents: Sequence[int]) -> np.ndarray:
    """Share of nonzero values flushed to zero at scales ``2**k``.

    Args:
        source (Trace or array of values): a trace (binade model, all steps pooled) or
            gradient values (exact float16 counts via :func:`sim.fp16.sweep`).
        exponents (sequence of int): the ``k``.
    """
    k = np.asarray(list(exponents), dtype=np.int64)
    if isinstance(source, Trace):
        return pooled_flushed_share(source, np.exp2(k.astype(np.float64)))
    result = sweep(source, k)
    nonzero = result.counts(int(k[0])).nonzero_in if k.size else 0
    return np.asarray(result.flushed, dtype=np.float64) / max(nonzero, 1)


def first_overflow_scale(source) -> float:
    """The smallest scale at which the source's largest finite gradient overflows float16.

    ``65520 / max |g|``; for a trace also no more than its smallest recorded
    ``overflow_scale``. inf when every value is 0.
    """
    if isinstance(source, Trace):
        finite = source.absmax[np.isfinite(source.absmax)]
        amax = float(finite.max()) if finite.size else 0.0
        recorded = float(source.overflow_scale.min())
    else:
        a = np.abs(np.asarray(source, dtype=np.float64))
        a = a[np.isfinite(a)]
        amax, recorded = (float(a.max()) if a.size else 0.0), math.inf
    return min(FP16_OVERFLOW / amax if amax > 0 else math.inf, recorded)


def plot_underflow_vs_scale(
    sources: Mapping[str, object],
    exponents: Sequence[int] = tuple(range(-2, 31)),
    ax=None,
    title: str = "Share of nonzero gradient values lost to underflow",
    figsize=(8.0, 5.5),
) -> Figure:
    """Share of nonzero values flushed to zero against the loss scale, one line per source.

    Each source has its own colour, line style and hollow marker, so overlapping lines stay
    visible. A dashed vertical line in the source's colour marks
    :func:`first_overflow_scale`: from there on the largest gradient overflows, so the line
    goes pale. A line ends where the share reaches exactly 0 (its legend entry says where).
    The legend sits below the axes.

    Args:
        sources (mapping label -> Trace or array of values): see :func:`underflow_curve`.
        exponents (sequence of int, default -2..30): scales ``2**k`` on the x axis.
        ax, title: as in :func:`plot_trajectory`.
        figsize (tuple, default (8, 5.5)): inches, for a new figure.
    """
    if not sources:
        raise ValueError("sources must hold at least one trace or array, got none")
    fig, ax = _axes(ax, figsize)
    k = np.asarray(list(exponents), dtype=np.int64)
    scales = np.exp2(k.astype(float))
    styles = [("-", "o"), ("--", "s"), ("-.", "^"), (":", "D"), ((0, (5, 1, 1, 1)), "v")]
    for i, (label, src) in enumerate(sources.items()):
        share = underflow_curve(src, k)
        zero = np.flatnonzero(share <= 0)
        if zero.size:
            label += f" (0 from {_pow2(scales[zero[0]])} on)"
        share = np.where(share > 0, share, np.nan)  # a share of 0 ends the line
        c = _color(i)
        ls, marker = styles[i % len(styles)]
        limit = first_overflow_scale(src)
        ok = scales < limit
        kw = dict(color=c, ls=ls, marker=marker, ms=5, mfc="none", lw=1.3)
        ax.plot(np.where(ok, scales, np.nan), share, label=label, **kw)
        tail = ~ok
        tail[max(np.argmax(tail) - 1, 0)] |= tail.any()  # join the pale part to the line
        ax.plot(np.where(tail, scales, np.nan), share, alpha=0.3, **kw)
        if scales[0] <= limit <= scales[-1]:  # dashes interleave where limits coincide
            ax.axvline(limit, color=c, ls=(3 * i, (3, 3 * len(sources) - 3)), lw=1.5)
    _note(ax, "vertical line: the largest gradient overflows from this scale on (line pale)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(top=1.5)
    ax.set_xlabel("loss scale (log2 axis)")
    ax.set_ylabel("share of nonzero values flushed to 0")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize="small")
    return fig


# ---------------------------------------------------------------- policy comparison


SPREAD_NOTE = "dot: run average (as in the tables); bar: min to max over runs"
"""What the dots and bars of :func:`plot_policy_comparison` show (for RunResult input)."""


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

    A dot is the run average of :func:`sim.run.summarize`; for a RunResult a bar spans the
    smallest to the largest per-run value. A dot at 0 on a log axis is written as "0" at the
    bottom; a family where every policy is 0 is labelled "all 0".

    Args:
        rows (sequence of dict or RunResult): rows from :func:`sim.run.summarize` (keys
            ``label``, ``trace`` and ``metric``) or results of :func:`sim.run.simulate`.
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
    fig, ax = _axes(ax, figsize)
    ax.set_yscale(yscale)
    width = 0.8 / len(labels)
    x = np.arange(len(families))
    bottom = ax.get_xaxis_transform()  # x in data, y in axes fraction
    for j, label in enumerate(labels):
        v, lo, hi = np.array([points.get((f, label), (np.nan,) * 3) for f in families]).T
        xj = x + (j - (len(labels) - 1) / 2) * width
        c = _color(j)
        shown = np.where((v > 0) | (yscale == "linear"), v, np.nan)
        ax.errorbar(
            xj,
            shown,
            yerr=np.array([v - lo, hi - v]),
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
    ax.set_xticklabels(families)
    ax.set_xlim(-0.5, len(families) - 0.5)
    ax.set_xlabel("trace family")
    ax.set_ylabel(f"{METRIC_LABELS[metric].split(' (')[0]} ({yscale} axis)")
    better = ", lower is better" if metric in LOWER_IS_BETTER else ""
    ax.set_title(title if title is not None else f"{METRIC_LABELS[metric]}{better}")
    ax.grid(True, axis="y", which="major", alpha=0.3)
    if legend:
        _legend_right(ax, title=SPREAD_NOTE.replace("; ", "\n"), title_fontsize="small")
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
