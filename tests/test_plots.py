"""Every figure renders to a real PNG of the expected size (sim/plots.py)."""

import matplotlib.image as mpimg
import numpy as np
import pytest
from matplotlib.figure import Figure

from sim import plots
from sim.run import PRESETS, simulate, simulate_many
from sim.traces import SSD_ZERO_SHARE, make_trace, sample_values, ssd_binade_shares


def _check_png(path, width, height):
    assert path.exists() and path.stat().st_size > 5000
    image = mpimg.imread(path)
    assert image.shape[:2] == (height, width)
    # not blank: many distinct colours
    assert len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)) > 20


@pytest.fixture(scope="module")
def nan_results():
    trace = make_trace("nan", steps=1500, seed=0, nan_prob=0.005)
    names = ["nnabla-legacy", "dynamic", "headroom"]
    return simulate_many([PRESETS[n] for n in names], trace, runs=3, labels=names)


def test_trajectory_png(tmp_path, nan_results):
    fig = plots.plot_trajectory(nan_results[1], runs=(0, 1))
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "training step"
    assert "log2" in ax.get_ylabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("safe band" in s for s in labels) and any("bad batch" in s for s in labels)
    _check_png(plots.save_figure(fig, tmp_path / "traj.png"), 800, 450)


def test_histogram_png_with_windows(tmp_path):
    trace = make_trace("ssd", steps=50)
    fig = plots.plot_histogram(trace, scales=(1.0, 8.0, 2.0**15))
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sum("fp16 window" in s for s in labels) == 3
    assert any("exact zeros: 66.8%" in s for s in labels)
    assert ax.get_yscale() == "log"
    _check_png(plots.save_figure(fig, tmp_path / "hist.png"), 800, 450)
    fig = plots.plot_histogram(trace, step=3, figsize=(6.0, 4.0))
    _check_png(plots.save_figure(fig, tmp_path / "hist_step.png"), 600, 400)


def test_underflow_vs_scale_png(tmp_path):
    sources = {
        "stationary": make_trace("stationary", steps=100),
        "ssd values": sample_values(ssd_binade_shares(), 2**14, SSD_ZERO_SHARE),
    }
    fig = plots.plot_underflow_vs_scale(sources, exponents=range(0, 20))
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    _check_png(plots.save_figure(fig, tmp_path / "under.png"), 800, 450)
    # the curve for values is float16's exact flushed share
    curve = plots.underflow_curve(sources["ssd values"], [0, 3])
    assert 0.9 < curve[0] < 1.0 and curve[1] < curve[0]


def test_policy_comparison_png(tmp_path, nan_results):
    rows = [r.summary() for r in nan_results]
    rows += [
        r.summary()
        for r in simulate_many(
            [PRESETS["dynamic"], PRESETS["headroom"]],
            make_trace("stationary", steps=300),
            runs=2,
            labels=["dynamic", "headroom"],
        )
    ]
    fig = plots.plot_policy_comparison(rows, "skipped", yscale="symlog")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["nan", "stationary"]
    assert len(ax.patches) == 3 * 2  # 3 policies x 2 families (missing ones are NaN bars)
    _check_png(plots.save_figure(fig, tmp_path / "cmp.png"), 900, 450)


def test_functions_draw_on_a_given_axes(tmp_path):
    fig = Figure(figsize=(10.0, 4.0), dpi=plots.DPI)
    left, right = fig.subplots(1, 2)
    trace = make_trace("drifting", steps=400)
    result = simulate(PRESETS["pytorch"], trace, runs=1)
    assert plots.plot_trajectory(result, ax=left) is fig
    assert plots.plot_histogram(trace, ax=right) is fig
    _check_png(plots.save_figure(fig, tmp_path / "both.png"), 1000, 400)


def test_bad_arguments(nan_results):
    with pytest.raises(ValueError, match="runs"):
        plots.plot_trajectory(nan_results[0], runs=(5,))
    with pytest.raises(ValueError, match="metric"):
        plots.plot_policy_comparison([nan_results[0].summary()], "speed")
    with pytest.raises(ValueError, match="yscale"):
        plots.plot_policy_comparison([nan_results[0].summary()], yscale="loglog")
    with pytest.raises(ValueError, match="step"):
        plots.plot_histogram(make_trace("stationary", steps=5), step=5)
    with pytest.raises(ValueError, match="sources"):
        plots.plot_underflow_vs_scale({})
