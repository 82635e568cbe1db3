"""Figure of per-layer underflow (:mod:`sim.replay.layers`): for each model, each parameter array's
share of nonzero gradient values flushed to zero against the loss scale, and the scale it needs.

Conventions (``Figure`` objects, saving, colours, legends) are those of :mod:`sim.plots.common`.
"""

from __future__ import annotations

import math
from typing import Dict, List, Sequence, Tuple

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MultipleLocator

from sim.casting.underflow import pooled_flushed_share
from sim.plots.common import (
    DPI,
    legend_note,
    legend_right,
    literal,
    log2_ticks,
    log10_share_ticks,
)
from sim.plots.style import nth_look
from sim.replay.layers import (
    TOLERANCE,
    check_layers,
    layer_flushed_curves,
    layer_view,
    needed_exponent,
    safe_exponent,
)
from updater.trace import Trace

MAX_LINES = 8
"""At most this many parameter arrays are drawn as lines per panel (those that need the
largest scales); the rest are one grey band."""


def plot_layer_flush(
    traces: Sequence[Trace],
    tolerance: float = TOLERANCE,
    exponents: Sequence[int] | None = None,
    axes=None,
    figsize=None,
) -> Figure:
    """Per model, each parameter array's flushed share against the loss scale.

    One panel per trace. The :data:`MAX_LINES` parameter arrays that need the largest scales
    are lines, each with its own colour and line style (:func:`sim.plots.style.nth_look`),
    named in the legend in the order of their need; the others are the grey band between
    their smallest and largest share; the whole model is the thick black line. A filled
    circle marks where each line first falls to ``tolerance`` or below
    (:func:`sim.replay.layers.needed_exponent`, all clean recorded steps pooled); the legend
    gives that scale. A line ends where its share reaches 0 (when it is 0 at the needed scale
    already, a hollow circle on the tolerance line marks the scale). The grey area is where
    the whole model's largest gradient overflows float16. Legends sit right of the axes.

    Args:
        traces (Trace or sequence of Trace): models recorded with per-parameter histograms.
        tolerance (float, default 1e-3): the flushed share drawn as the dotted line.
        exponents (sequence of int or None): scales ``2**k`` on the x axis; default ``2**0`` to
            ``2**24``, widened to one step past the smallest and largest need.
        axes (sequence of Axes or None): one per trace; default a new figure, panels stacked.
        figsize (tuple or None): inches of a new figure; default 10 wide, 4.2 high per panel.
    """
    traces = [check_layers(t) for t in ([traces] if isinstance(traces, Trace) else traces)]
    if not traces:
        raise ValueError("traces must hold at least one trace with layers, got none")
    needs = [_needs(t, tolerance) for t in traces]
    if exponents is None:
        found = [k for n in needs for k, _ in n.values() if k is not None]
        exponents = range(min([0] + [k - 1 for k in found]), max([24] + [k + 1 for k in found]) + 1)
    k = np.asarray(list(exponents), dtype=np.int64)
    if axes is None:  # a panel's height leaves room for its legend
        size = figsize or (10.0, 4.2 * len(traces))
        fig = Figure(figsize=size, dpi=DPI, layout="constrained")
        axes = fig.subplots(len(traces), 1, sharex=True, squeeze=False)[:, 0]
    if len(axes) != len(traces):
        raise ValueError(f"axes must hold one Axes per trace ({len(traces)}), got {len(axes)}")
    for ax, trace, need in zip(axes, traces, needs):
        _panel(ax, trace, k, tolerance, need)
    axes[-1].set_xlabel("loss scale")
    return axes[0].figure


def _needs(trace: Trace, tolerance: float) -> Dict:
    """:func:`needed_exponent` per layer name, and the whole model's under None."""
    out = {None: needed_exponent(layer_view(trace, None), tolerance)}
    for i, name in enumerate(trace.layer_names):
        out[name] = needed_exponent(layer_view(trace, i), tolerance)
    return out


def _panel(ax, trace: Trace, k: np.ndarray, tolerance: float, needs: Dict) -> None:
    scales = np.exp2(k.astype(np.float64))
    curves = dict(zip(trace.layer_names, layer_flushed_curves(trace, scales)))
    whole = layer_view(trace, None)
    shown, rest = _split(curves, needs, k)
    for i, name in enumerate(shown):
        look = nth_look(i)
        kw = dict(color=look.color, ls=look.ls, lw=1.4)
        _curve(ax, k, curves[name], needs[name], tolerance, name, kw)
    if rest:
        band = np.array([curves[n] for n in rest])
        low = np.where(band > 0, band, np.nan)
        # fmin/fmax skip NaN and give NaN (no band) where every array is 0, without a warning
        lowest, highest = np.fmin.reduce(low, axis=0), np.fmax.reduce(low, axis=0)
        ax.fill_between(
            k,
            lowest,
            highest,
            color="0.8",
            lw=0,
            label=f"the other {len(rest)} arrays (min to max)",
        )
    kw = dict(color="black", lw=3.0)
    _curve(ax, k, pooled_flushed_share(whole, scales), needs[None], tolerance, "whole model", kw)
    ax.axhline(tolerance, color="0.3", ls=(0, (1, 2)), lw=1.2, label=f"tolerance {tolerance:g}")
    legend_note(ax, "a line ends where no value is flushed")
    ax.plot([], [], "o", color="0.4", label="the scale each line needs")
    ax.plot([], [], "o", color="0.4", mfc="white", label="the same, where the share is 0")
    safe = safe_exponent(whole)
    if safe is not None and safe < k[-1]:
        ax.axvspan(
            max(safe, k[0]),
            k[-1],
            facecolor="none",
            edgecolor="0.6",
            hatch="//",
            lw=0,
            label=f"whole model's largest gradient\noverflows above $2^{{{safe}}}$",
        )
    ax.set_yscale("log")
    ax.set_ylim(top=1.5)
    ax.yaxis.set_major_formatter(log10_share_ticks())
    span = max(int(k[-1] - k[0]), 1)
    ax.set_xlim(k[0], k[-1])
    ax.xaxis.set_major_locator(MultipleLocator(2 ** max(1, math.ceil(math.log2(span / 13)))))
    ax.xaxis.set_major_formatter(log2_ticks())
    ax.tick_params(labelbottom=True)
    ax.grid(True, which="major", alpha=0.3)
    ax.set_ylabel("share of nonzero gradient\nvalues flushed to zero")
    ax.set_title(
        f"{literal(trace.name)}: {len(curves)} parameter arrays, {whole.steps} of {trace.steps} "
        "recorded steps clean (pooled)",
        fontsize="medium",
        loc="left",
    )
    title = f"parameter array: the smallest scale\nwith flushed share $\\leq$ {tolerance:g}"
    legend_right(ax, title=title, title_fontsize="small")


def _split(curves: Dict, needs: Dict, k: np.ndarray) -> Tuple[List[str], List[str]]:
    """The arrays drawn as lines (largest need first, then largest flushed share) and the
    rest."""

    def order(name):
        need = needs[name][0]
        return (-(need if need is not None else k[0] - 1), -float(np.nansum(curves[name])), name)

    ranked = sorted(curves, key=order)
    return ranked[:MAX_LINES], ranked[MAX_LINES:]


def _curve(ax, k, share, need_reason, tolerance, label, kw) -> None:
    """One line (ending where the share is 0) and its need marker."""
    need, reason = need_reason
    text = f"n/a ({reason})" if need is None else f"$2^{{{need}}}$"
    ax.plot(k, np.where(share > 0, share, np.nan), label=f"{literal(label)}: {text}", **kw)
    at = np.flatnonzero(k == need)
    if at.size and share[at[0]] > 0:
        ax.plot([need], [share[at[0]]], "o", color=kw["color"], ms=6, zorder=3)
    elif at.size:
        ax.plot([need], [tolerance], "o", mfc="white", color=kw["color"], ms=6, zorder=3)
