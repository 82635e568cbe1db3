"""Matplotlib figures for the simulator (Agg backend; no screen needed).

Each function takes ``ax=None``: it draws on ``ax`` when given, otherwise on a new figure of
``figsize`` inches at 100 dpi, and returns the figure. :func:`save_figure` writes a PNG of
exactly ``figsize * dpi`` pixels.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, Mapping, Sequence, Union

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from sim.fp16 import representable_window, sweep  # noqa: E402
from sim.run import FP16_OVERFLOW, RunResult, flushed_share  # noqa: E402
from sim.traces import EXP_MIN, NBINS, Trace  # noqa: E402

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


def _axes(ax, figsize):
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=figsize, dpi=DPI)
    return fig, fig.add_subplot()


def save_figure(fig: Figure, path: Union[str, Path], dpi: int = DPI) -> Path:
    """Write ``fig`` as a PNG (no version metadata, so reruns give the same bytes).

    Args:
        fig (Figure): the figure.
        path (str or Path): output file; its folder must exist.
        dpi (int, default 100): dots per inch; the image is ``figsize * dpi`` pixels.
    """
    path = Path(path)
    fig.savefig(path, dpi=dpi, format="png", metadata={"Software": None})
    plt.close(fig)
    return path


def plot_trajectory(
    result: RunResult,
    runs: Sequence[int] = (0,),
    ax=None,
    title: Union[str, None] = None,
    figsize=(8.0, 4.5),
) -> Figure:
    """Loss scale against step (log2 axis) with overflow and skip markers and the safe band.

    The band spans ``[safe / 2, safe]`` for the first run shown, where ``safe`` is the largest
    power-of-two scale that does not overflow at that step (capped at the policy's max_scale).

    Args:
        result (RunResult): from :func:`sim.run.simulate`.
        runs (sequence of int, default (0,)): which runs to draw, each in [0, result.runs).
        ax (Axes, optional): draw here; default a new figure.
        title (str, optional): default "<policy> on <trace>".
        figsize (tuple, default (8, 4.5)): inches, for a new figure.
    """
    runs = list(runs)
    bad = [r for r in runs if not (isinstance(r, (int, np.integer)) and 0 <= r < result.runs)]
    if not runs or bad:
        raise ValueError(f"runs must be indices in [0, {result.runs}), got {runs!r}")
    fig, ax = _axes(ax, figsize)
    steps = np.arange(result.steps)
    first = runs[0]
    safe = result.safe_scale[:, first]
    ax.fill_between(
        steps,
        safe / 2,
        safe,
        step="post",
        color="tab:green",
        alpha=0.2,
        lw=0,
        label="safe band [safe/2, safe]",
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, r in enumerate(runs):
        ax.step(
            steps,
            result.scale[:, r],
            where="post",
            color=colors[i % len(colors)],
            lw=1.2,
            label=f"scale, run {r}" if len(runs) > 1 else "scale",
        )
    s = result.scale[:, first]
    ovf = np.flatnonzero(result.overflow[:, first])
    bad_batch = np.flatnonzero(result.skipped[:, first] & ~result.overflow[:, first])
    if ovf.size:
        ax.plot(ovf, s[ovf], "v", color="tab:red", ms=5, label=f"overflow ({ovf.size})")
    if bad_batch.size:
        ax.plot(
            bad_batch,
            s[bad_batch],
            "x",
            color="black",
            ms=6,
            label=f"skipped: bad batch ({bad_batch.size})",
        )
    ax.set_yscale("log", base=2)
    ax.set_xlabel("training step")
    ax.set_ylabel("loss scale (log2 axis)")
    ax.set_xlim(0, result.steps)
    ax.set_title(title if title is not None else f"{result.label} on {result.trace_name}")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="best", fontsize="small", framealpha=0.85)
    return fig


def plot_histogram(
    trace: Trace,
    step: Union[int, None] = None,
    scales: Sequence[float] = (1.0, 8.0, 2.0**15),
    ax=None,
    title: Union[str, None] = None,
    figsize=(8.0, 4.5),
) -> Figure:
    """Gradient-magnitude histogram by binade, with float16's representable window at several
    scales.

    Bars give each binade's share of ALL values (exact zeros included in the total, shown in
    the legend). For each scale ``s`` the window ``[2**-24 / s, 65504 / s]`` of unscaled
    magnitudes that stay nonzero and finite is drawn as a bracket; values left of it flush to
    zero, values right of it overflow.

    Args:
        trace (Trace): the trace.
        step (int, optional): one step to show; default all steps pooled.
        scales (sequence of float, default (1, 8, 2**15)): loss scales to draw windows for.
        ax, title, figsize: as in :func:`plot_trajectory`.
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
        color="tab:blue",
        alpha=0.75,
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
    colors = ["tab:red", "tab:orange", "tab:purple", "tab:brown", "tab:cyan", "tab:olive"]
    for i, s in enumerate(scales):
        lo, hi = representable_window(s)
        c = colors[i % len(colors)]
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
        ax.plot(
            [],
            [],
            color=c,
            lw=1.5,
            label=f"fp16 window at scale {_fmt_scale(s)}: [2^{math.log2(lo):.0f}, {hi:.4g}]",
        )
    xmin = min(lo_b, *(math.log2(representable_window(s)[0]) for s in scales)) - 2
    xmax = max(hi_b + 1, *(math.log2(representable_window(s)[1]) for s in scales)) + 2
    ax.set_xlim(xmin, xmax)
    ax.set_xlabel("log2 |gradient| (unscaled)")
    ax.set_ylabel("share of all values (log scale)")
    where = "all steps" if step is None else f"step {step}"
    ax.set_title(title if title is not None else f"{trace.name}: gradient magnitudes, {where}")
    ax.grid(True, axis="y", which="major", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small", framealpha=0.85)
    return fig


def _fmt_scale(s: float) -> str:
    k = math.log2(s)
    return f"2^{int(k)}" if k == int(k) and abs(k) >= 4 else f"{s:g}"


def underflow_curve(source, exponents: Sequence[int]) -> np.ndarray:
    """Share of nonzero values flushed to zero at scales ``2**k``.

    Args:
        source (Trace or array of values): a trace (binade model, all steps pooled) or
            gradient values (exact float16 counts via :func:`sim.fp16.sweep`).
        exponents (sequence of int): the ``k``.
    """
    k = np.asarray(list(exponents), dtype=np.int64)
    if isinstance(source, Trace):
        pooled = Trace(
            source.counts.sum(axis=0, keepdims=True),
            [source.zeros.sum()],
            [source.absmax.max()],
            [False],
            name=source.name,
        )
        return np.array([flushed_share(pooled, 2.0 ** int(e))[0] for e in k])
    result = sweep(source, k)
    nonzero = result.counts(int(k[0])).nonzero_in if k.size else 0
    return np.asarray(result.flushed, dtype=np.float64) / max(nonzero, 1)


def plot_underflow_vs_scale(
    sources: Mapping[str, object],
    exponents: Sequence[int] = tuple(range(-2, 31)),
    ax=None,
    title: str = "Share of nonzero gradient values lost to underflow",
    figsize=(8.0, 4.5),
) -> Figure:
    """Share of nonzero values flushed to zero against the loss scale, one line per source.

    For a trace, a marker shows the first scale at which its median step overflows
    (``absmax * scale >= 65520``). A line ends where the share reaches exactly 0.

    Args:
        sources (mapping label -> Trace or array of values): see :func:`underflow_curve`.
        exponents (sequence of int, default -2..30): scales ``2**k`` on the x axis.
        ax, title, figsize: as in :func:`plot_trajectory`.
    """
    if not sources:
        raise ValueError("sources must hold at least one trace or array, got none")
    fig, ax = _axes(ax, figsize)
    k = np.asarray(list(exponents), dtype=np.int64)
    scales = np.exp2(k.astype(float))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, src) in enumerate(sources.items()):
        share = underflow_curve(src, k)
        share = np.where(share > 0, share, np.nan)  # a share of 0 ends the line
        c = colors[i % len(colors)]
        ax.plot(scales, share, "-o", ms=3, color=c, label=label)
        if isinstance(src, Trace):
            median = float(np.median(src.absmax))
            over = np.flatnonzero(median * scales >= FP16_OVERFLOW)
            if over.size:
                j = over[0]
                ax.plot(scales[j], share[j], "X", ms=10, color=c, mec="black")
    ax.plot([], [], "X", color="gray", mec="black", ms=10, label="overflow from here (median step)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(top=1.5)
    ax.set_xlabel("loss scale (log2 axis)")
    ax.set_ylabel("share of nonzero values flushed to 0")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="lower left", fontsize="small", framealpha=0.85)
    return fig


def plot_policy_comparison(
    rows: Sequence[Dict[str, object]],
    metric: str = "signal_lost",
    ax=None,
    yscale: str = "log",
    title: Union[str, None] = None,
    figsize=(9.0, 4.5),
    legend: bool = True,
) -> Figure:
    """Grouped bars: one group per trace family, one bar per policy.

    Args:
        rows (sequence of dict): rows from :func:`sim.run.summarize` with keys ``label``,
            ``trace`` and ``metric``.
        metric (str, default "signal_lost"): a key of :data:`METRIC_LABELS`.
        ax (Axes, optional), title (str, optional), figsize: as in :func:`plot_trajectory`.
        yscale (str, default "log"): "linear", "log" or "symlog" (for metrics that can be 0).
        legend (bool, default True): draw a legend of the policies on this axes.
    """
    if metric not in METRIC_LABELS:
        raise ValueError(f"metric must be one of {sorted(METRIC_LABELS)}, got {metric!r}")
    if yscale not in ("linear", "log", "symlog"):
        raise ValueError(f"yscale must be 'linear', 'log' or 'symlog', got {yscale!r}")
    if not rows:
        raise ValueError("rows must hold at least one row, got none")
    families = list(dict.fromkeys(r["trace"] for r in rows))
    labels = list(dict.fromkeys(r["label"] for r in rows))
    value = {(r["trace"], r["label"]): float(r[metric]) for r in rows}
    fig, ax = _axes(ax, figsize)
    width = 0.8 / len(labels)
    x = np.arange(len(families))
    for j, label in enumerate(labels):
        heights = [value.get((f, label), np.nan) for f in families]
        ax.bar(x + (j - (len(labels) - 1) / 2) * width, heights, width, label=label)
    ax.set_xticks(x)
    ax.set_xticklabels(families)
    ax.set_xlabel("trace family")
    ax.set_ylabel(METRIC_LABELS[metric])
    if yscale == "symlog":
        ax.set_yscale("symlog", linthresh=1.0)
    else:
        ax.set_yscale(yscale)
    ax.set_title(title if title is not None else METRIC_LABELS[metric])
    ax.grid(True, axis="y", which="major", alpha=0.3)
    if legend:
        ax.legend(fontsize="small", ncol=min(len(labels), 3), framealpha=0.85)
    return fig
