"""Figures of gradient distributions (a :class:`updater.trace.Trace` or an array of values):
magnitudes by binade, and the share float16 flushes to zero at each loss scale.

:func:`plot_histogram` draws the share of values per binade with float16's representable
window at several scales; :func:`plot_underflow_vs_scale` draws :func:`underflow_curve` (the
flushed share: :mod:`sim.casting.underflow` for traces, :func:`sim.casting.scales.sweep` for values)
against the scale, pale from :func:`first_overflow_scale` on. Conventions (``ax=``, saving,
colours) are those of :mod:`sim.plots.common`.
"""

from __future__ import annotations

import math
from typing import Dict, Mapping, Sequence, Union

import numpy as np
from matplotlib.figure import Figure

from sim.casting.counts import representable_window
from sim.casting.scales import sweep
from sim.casting.underflow import pooled_flushed_share
from sim.plots.common import (
    DPI,
    is_pow2,
    legend_note,
    literal,
    log2_ticks,
    log10_share_ticks,
    new_axes,
    percent_ticks,
    pow2_label,
)
from sim.plots.style import nth_look, scale_look
from updater.common.float16 import FP16_OVERFLOW
from updater.trace import EXP_MIN, NBINS, Trace

# ---------------------------------------------------------------- histograms by binade


def plot_histogram(
    trace: Trace,
    step: Union[int, None] = None,
    scales: Sequence[float] = (1.0, 8.0, 2.0**15),
    ax=None,
    title: Union[str, None] = None,
    figsize=(8.0, 6.0),
) -> Figure:
    """Gradient-magnitude histogram by binade, with float16's representable window at several
    scales.

    Bars give each binade's share of ALL values (exact zeros included in the total, shown in
    the legend). For each scale ``s`` the window ``[2**-24 / s, 65504 / s]`` of unscaled
    magnitudes that stay nonzero and finite is drawn as a bar in a strip above the axes
    (labelled by scale), and its flush limit as a vertical line over the histogram, in the
    scale's look (:func:`sim.plots.style.scale_look`: colour by scale, line style by
    position); values left of it flush to zero, values right of it overflow. The legend sits
    below the axes.

    Args:
        trace (Trace): the trace.
        step (int, optional): one step to show; default all steps pooled.
        scales (sequence of float, default (1, 8, 2**15)): loss scales to draw windows for.
        ax (Axes, optional): draw here; default a new figure.
        title (str, optional): default "<trace name>: gradient magnitudes, <all steps or
            step n of N>" (steps counted from 1).
        figsize (tuple, default (8, 6)): inches, for a new figure (strip and histogram as two
            rows; on a given ``ax`` the strip is an inset above it).
    """
    counts, zeros = _histogram_of(trace, step)
    total = counts.sum() + zeros
    if ax is None:
        fig = Figure(figsize=figsize, dpi=DPI, layout="constrained")
        strip, ax = fig.subplots(2, 1, sharex=True, height_ratios=[1, 4])
    else:
        fig = ax.figure
        strip = ax.inset_axes([0.0, 1.03, 1.0, 0.06 + 0.05 * len(scales)], sharex=ax)
    lo_b, hi_b = _draw_bars(ax, counts, zeros, total)
    _draw_windows(ax, strip, scales)
    xmin = min(lo_b, *(math.log2(representable_window(s)[0]) for s in scales)) - 2
    xmax = max(hi_b + 1, *(math.log2(representable_window(s)[1]) for s in scales)) + 2
    ax.set_xlim(xmin, xmax)
    ax.xaxis.set_major_formatter(log2_ticks())
    ax.set_xlabel("|gradient|, unscaled (log2 axis)")
    ax.set_ylabel("share of all values (log scale)")
    where = "all steps" if step is None else f"step {step + 1} of {trace.steps}"
    if step is not None and trace.every > 1:
        where = f"recorded {where} (training step {step * trace.every + 1})"
    title = title if title is not None else f"{literal(trace.name)}: gradient magnitudes, {where}"
    strip.set_title(title)
    ax.grid(True, axis="y", which="major", alpha=0.3)
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16),
        ncol=2,
        fontsize="small",
        title="kept: float16 keeps |gradient| nonzero and finite in [$2^{-24}$, 65504] / scale;\n"
        "left of a scale's vertical line its values flush to zero",
        title_fontsize="small",
    )
    return fig


def _histogram_of(trace: Trace, step) -> tuple:
    """The binade counts and the exact zeros of ``trace``'s ``step`` (None: all pooled)."""
    if step is None:
        counts, zeros = trace.counts.sum(axis=0), int(trace.zeros.sum())
    else:
        if not (isinstance(step, (int, np.integer)) and 0 <= step < trace.steps):
            raise ValueError(f"step must be an int in [0, {trace.steps}), got {step!r}")
        counts, zeros = trace.counts[step], int(trace.zeros[step])
    if counts.sum() + zeros == 0:
        raise ValueError("trace has no values to plot (all counts and zeros are 0)")
    return counts, zeros


def _draw_bars(ax, counts, zeros: int, total) -> tuple:
    """The bars of each binade's share of all values on a log axis; the lowest and highest
    binade used (-30, 0 when none is)."""
    binades = np.arange(NBINS) + EXP_MIN
    share = counts / total
    used = np.flatnonzero(counts)
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
    ax.set_ylim(ymin, ymax * 3)
    ax.yaxis.set_major_formatter(log10_share_ticks())
    return (binades[used[0]], binades[used[-1]]) if used.size else (-30, 0)


def _draw_windows(ax, strip, scales) -> None:
    """Each scale's representable window as a bar in the ``strip`` and its flush limit as a
    line over the histogram, in the scale's look, with its legend entry."""
    for i, s in enumerate(scales):
        lo, hi = representable_window(s)
        look = scale_look(round(math.log2(s)), i)
        kw = dict(color=look.color, ls=look.ls, lw=1.8)
        strip.plot([math.log2(lo), math.log2(hi)], [i, i], marker="|", ms=9, **kw)
        ax.axvline(math.log2(lo), **{**kw, "lw": 1.2})
        top = f"65504$\\cdot${pow2_label(1 / s)}" if is_pow2(s) else f"{hi:.4g}"
        ax.plot([], [], **kw, label=f"scale {pow2_label(s)}: [{pow2_label(lo)}, {top}]")
    strip.set_yticks(range(len(scales)), [pow2_label(s) for s in scales], fontsize="small")
    strip.set_ylim(len(scales) - 0.4, -0.6)
    strip.set_ylabel("scale", fontsize="small")
    strip.tick_params(labelbottom=False)
    strip.grid(True, axis="x", alpha=0.3)


# ---------------------------------------------------------------- underflow against scale


def underflow_curve(source, exponents: Sequence[int]) -> np.ndarray:
    """Share of nonzero values flushed to zero at scales ``2**k``.

    Args:
        source (Trace or array of values): a trace (binade model, all steps pooled) or
            gradient values (exact float16 counts via :func:`sim.casting.scales.sweep`).
        exponents (sequence of int): the ``k``.
    """
    k = np.asarray(list(exponents), dtype=np.int64)
    if isinstance(source, Trace):
        return pooled_flushed_share(source, np.exp2(k.astype(np.float64)))
    return sweep(source, k).share_flushed


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

    Each source has its own colour, line style and hollow marker
    (:func:`sim.plots.style.nth_look`), so overlapping lines stay visible. A vertical line in
    the source's colour and line style, topped by its marker, marks
    :func:`first_overflow_scale`: from there on the largest gradient overflows, so the line
    goes pale; where limits coincide, their markers stack. A line ends where the share
    reaches exactly 0 (its legend entry says where).
    The legend sits below the axes.

    Args:
        sources (mapping label -> Trace or array of values): see :func:`underflow_curve`.
        exponents (sequence of int, default -2..30): scales ``2**k`` on the x axis.
        ax (Axes, optional): draw here; default a new figure.
        title (str): the axes title.
        figsize (tuple, default (8, 5.5)): inches, for a new figure.
    """
    if not sources:
        raise ValueError("sources must hold at least one trace or array, got none")
    fig, ax = new_axes(ax, figsize)
    k = np.asarray(list(exponents), dtype=np.int64)
    stacked: Dict[float, int] = {}
    for i, (label, src) in enumerate(sources.items()):
        _draw_source(ax, nth_look(i), literal(label), src, k, stacked)
    legend_note(
        ax,
        "vertical line, marker on top: the largest\ngradient overflows from there on "
        "(markers\nstacked on one line: the same scale)",
    )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(top=1.5)
    ax.set_xlabel("loss scale (log2 axis)")
    ax.yaxis.set_major_formatter(percent_ticks())
    ax.set_ylabel("nonzero values flushed to 0 (%)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncol=2,
        fontsize="small",
        title="a line goes pale where its largest gradient overflows",
        title_fontsize="small",
    )
    return fig


def _draw_source(ax, look, label: str, src, k, stacked: Dict[float, int]) -> None:
    """One source's line of flushed shares at scales ``2**k`` in ``look``, pale past its
    :func:`first_overflow_scale`, which a line topped by its marker marks (``stacked``: how
    many markers each limit drawn so far carries)."""
    scales = np.exp2(k.astype(float))
    share = underflow_curve(src, k)
    limit = first_overflow_scale(src)
    zero = np.flatnonzero(share <= 0)
    if zero.size and scales[zero[0]] < limit:  # past the overflow it says nothing useful
        label += f" (0 from {pow2_label(scales[zero[0]])} on)"
    share = np.where(share > 0, share, np.nan)  # a share of 0 ends the line
    ok = scales < limit
    kw = look.line(ms=5, lw=1.3)
    ax.plot(np.where(ok, scales, np.nan), share, label=label, **kw)
    tail = ~ok
    tail[max(np.argmax(tail) - 1, 0)] |= tail.any()  # join the pale part to the line
    ax.plot(np.where(tail, scales, np.nan), share, alpha=0.3, **kw)
    if scales[0] <= limit <= scales[-1]:
        near = next((x for x in stacked if abs(math.log2(x / limit)) < 0.3), limit)
        j = stacked[near] = stacked.get(near, -1) + 1
        if j == 0:  # one line per limit: coinciding limits stack their markers on it
            ax.axvline(limit, color=look.color, ls=look.ls, lw=1.2)
        ax.plot(
            [limit],
            [1.0 - 0.045 * j],
            marker=look.marker,
            color=look.color,
            ms=7,
            transform=ax.get_xaxis_transform(),
            clip_on=False,
        )
