"""The gradient figures (:mod:`sim.plots.gradients`): the binade histogram with float16's
windows, and the flushed share against the loss scale."""

import numpy as np
from matplotlib.colors import to_hex

from sim.plots import common as plot_common
from sim.plots import gradients as plot_gradients
from sim.plots import style
from sim.traces.families import SSD_ZERO_SHARE, make_trace, sample_values, ssd_binade_shares
from tests.sim.plots.drawn import check_png, extent, legend_labels
from updater.common.float16 import FP16_OVERFLOW

NAMES = ["nnabla-legacy", "pytorch", "dynamic", "headroom"]


# ---------------------------------------------------------------- histograms


def test_histogram_png_with_windows(tmp_path):
    trace = make_trace("ssd", steps=50)
    fig = plot_gradients.plot_histogram(trace, scales=(1.0, 8.0, 2.0**15))
    strip, ax = fig.axes
    labels = legend_labels(ax.get_legend())
    assert labels[:3] == [
        "scale $2^{0}$: [$2^{-24}$, 65504$\\cdot$$2^{0}$]",
        "scale $2^{3}$: [$2^{-27}$, 65504$\\cdot$$2^{-3}$]",
        "scale $2^{15}$: [$2^{-39}$, 65504$\\cdot$$2^{-15}$]",
    ]
    assert any("exact zeros: 66.8%" in s for s in labels)
    assert ax.get_yscale() == "log"
    limits = [ln for ln in ax.get_lines() if len(set(ln.get_xdata())) == 1]
    assert [ln.get_xdata()[0] for ln in limits] == [-24, -27, -39]
    assert len({ln.get_linestyle() for ln in limits}) == 3  # told apart by line style too
    check_png(plot_common.save_figure(fig, tmp_path / "hist.png"), 800, 600)
    fig = plot_gradients.plot_histogram(trace, step=3, figsize=(6.0, 4.0))
    assert fig.axes[0].get_title() == "ssd: gradient magnitudes, step 4 of 50"  # 1-based
    assert not ax.texts and not [c for c in ax.get_children() if type(c).__name__ == "Annotation"]
    assert [t.get_text() for t in strip.get_yticklabels()] == ["$2^{0}$", "$2^{3}$", "$2^{15}$"]
    check_png(plot_common.save_figure(fig, tmp_path / "hist_step.png"), 600, 400)


def test_histogram_colours_are_fixed_per_scale_and_the_legend_is_below():
    def colours(fig):
        ax = fig.axes[1]
        return {
            ln.get_label().split(":")[0]: to_hex(ln.get_color())
            for ln in ax.get_lines()
            if ln.get_label().startswith("scale")
        }

    ssd = plot_gradients.plot_histogram(make_trace("ssd", steps=20), scales=(1.0, 8.0, 2.0**15))
    drift = plot_gradients.plot_histogram(
        make_trace("drifting", steps=20), scales=(8.0, 2.0**8, 2.0**15)
    )
    a, b = colours(ssd), colours(drift)
    for k in (3, 15):
        name = f"scale $2^{{{k}}}$"
        assert a[name] == b[name] == to_hex(style.scale_look(k).color)
    assert len(set(a.values())) == 3 and len(set(b.values())) == 3
    ax = ssd.axes[1]
    assert extent(ssd, ax.get_legend()).y1 < ax.get_window_extent().y0


# ---------------------------------------------------------------- underflow against scale


def test_underflow_vs_scale_png(tmp_path):
    values = sample_values(ssd_binade_shares(), 2**14, SSD_ZERO_SHARE)
    sources = {"stationary": make_trace("stationary", steps=100), "ssd values": values}
    fig = plot_gradients.plot_underflow_vs_scale(sources, exponents=range(0, 20))
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    labels = legend_labels(ax.get_legend())
    assert labels[0] == "stationary (0 from $2^{13}$ on)"  # says why the line ends
    assert labels[-1].startswith("vertical line, marker on top: the largest")
    assert extent(fig, ax.get_legend()).y1 < ax.get_window_extent().y0
    curves = [ln for ln in ax.get_lines() if ln.get_label().split(" (")[0] in sources]
    assert len({(ln.get_linestyle(), ln.get_marker()) for ln in curves}) == 2
    assert all(ln.get_markerfacecolor() == "none" for ln in curves)
    # the overflow limit of the stationary trace: a vertical line, pale curve from there
    limit = plot_gradients.first_overflow_scale(sources["stationary"])
    assert limit == FP16_OVERFLOW / sources["stationary"].absmax.max()
    vertical = [ln for ln in ax.get_lines() if list(ln.get_xdata()) == [limit, limit]]
    assert len(vertical) == 1 and to_hex(vertical[0].get_color()) == to_hex(curves[0].get_color())
    assert vertical[0].get_linestyle() == curves[0].get_linestyle()
    (top,) = [ln for ln in ax.get_lines() if list(ln.get_xdata()) == [limit]]
    assert top.get_marker() == curves[0].get_marker()  # the source's marker tops its line
    solid = curves[0].get_xdata()
    assert np.nanmax(solid) < limit
    pale = [ln for ln in ax.get_lines() if ln.get_alpha() == 0.3][0]
    assert np.nanmax(pale.get_xdata()) > limit
    check_png(plot_common.save_figure(fig, tmp_path / "under.png"), 800, 550)
    # the curve for values is float16's exact flushed share
    curve = plot_gradients.underflow_curve(values, [0, 3])
    assert 0.9 < curve[0] < 1.0 and curve[1] < curve[0]
    assert plot_gradients.first_overflow_scale(values) == FP16_OVERFLOW / np.abs(values).max()
