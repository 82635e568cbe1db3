"""Figures of sim/plots/runs.py, sim/plots/gradients.py and the demo, and the figure files of
sim/plots/common.py: what each draws, checked on its artists, and that it renders to a real file
of the expected size and format."""

import math
import os
import subprocess
import sys

import matplotlib.image as mpimg
import numpy as np
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from sim.plots import common as plot_common
from sim.plots import gradients as plot_gradients
from sim.plots import runs as plot_runs
from sim.replay.run import simulate, simulate_many
from sim.traces.families import SSD_ZERO_SHARE, make_trace, sample_values, ssd_binade_shares
from updater.common.float16 import FP16_OVERFLOW
from updater.policy.presets import PRESETS

NAMES = ["nnabla-legacy", "pytorch", "dynamic", "headroom"]


def _check_png(path, width, height):
    assert path.exists() and path.stat().st_size > 5000
    image = mpimg.imread(path)
    assert image.shape[:2] == (height, width)
    # not blank: many distinct colours
    assert len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)) > 20


def _legend_labels(legend):
    return [t.get_text() for t in legend.get_texts()]


def _extent(fig, artist):
    fig.canvas.draw()  # FigureCanvasBase renders through Agg here
    return artist.get_window_extent()


def _line(ax, label_part):
    (line,) = [ln for ln in ax.get_lines() if label_part in ln.get_label()]
    return line


@pytest.fixture(scope="module")
def nan_results():
    trace = make_trace("nan", steps=1500, seed=0, nan_prob=0.005)
    names = ["nnabla-legacy", "dynamic", "headroom"]
    return simulate_many([PRESETS[n] for n in names], trace, runs=3, labels=names)


@pytest.fixture(scope="module")
def stationary():
    trace = make_trace("stationary", steps=2000)
    return simulate_many([PRESETS[n] for n in NAMES], trace, runs=3, labels=NAMES)


@pytest.fixture(scope="module")
def ssd():
    trace = make_trace("ssd", steps=300)
    return simulate_many([PRESETS[n] for n in NAMES], trace, runs=2, labels=NAMES)


# ---------------------------------------------------------------- no side effects, saving


def test_importing_changes_no_matplotlib_setting():
    code = (
        "import sys, matplotlib; import sim.plots.common, sim.plots.gradients, sim.plots.runs; "
        "import sim.nnabla_studies.demo; "
        "assert matplotlib.get_backend() == 'svg', matplotlib.get_backend(); "
        "assert 'matplotlib.pyplot' not in sys.modules"
    )
    env = dict(os.environ, MPLBACKEND="svg")
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@pytest.mark.parametrize(
    "name,fmt", [("t.png", "png"), ("T.PDF", "pdf"), ("t.svg", "svg"), ("t.jpg", "jpg")]
)
def test_check_figure_path_accepts_matplotlib_formats(tmp_path, name, fmt):
    assert fmt in plot_common.figure_formats()
    assert plot_common.check_figure_path(tmp_path / name) == fmt


@pytest.mark.parametrize(
    "name,fragment",
    [("t.xyz", "cannot write '.xyz' files; use one of: "), ("t", "has no extension; add one of")],
)
def test_check_figure_path_rejects_other_extensions(tmp_path, name, fragment):
    with pytest.raises(ValueError, match=fragment) as err:
        plot_common.check_figure_path(tmp_path / name)
    assert "png" in str(err.value) and "pdf" in str(err.value)
    assert "\n" not in str(err.value)  # one line for the CLI


def test_check_figure_path_rejects_a_missing_folder_and_non_paths(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        plot_common.check_figure_path(tmp_path / "nope" / "t.png")
    with pytest.raises(TypeError, match="str or Path"):
        plot_common.check_figure_path(3)


def test_save_figure_writes_the_format_of_the_extension(tmp_path, ssd):
    fig = plot_runs.plot_trajectory(ssd[2])
    magic = {"png": b"\x89PNG", "pdf": b"%PDF", "svg": b"<?xml", "jpg": b"\xff\xd8"}
    for fmt, head in magic.items():
        path = plot_common.save_figure(fig, tmp_path / f"t.{fmt}")
        assert path.read_bytes().startswith(head)
    assert b"Matplotlib v" not in (tmp_path / "t.pdf").read_bytes()
    first = (tmp_path / "t.png").read_bytes()
    assert plot_common.save_figure(fig, tmp_path / "t.png").read_bytes() == first  # same bytes
    with pytest.raises(ValueError, match="xyz"):
        plot_common.save_figure(fig, tmp_path / "t.xyz")
    assert not (tmp_path / "t.xyz").exists()


# ---------------------------------------------------------------- trajectories


def test_trajectory_png(tmp_path, nan_results):
    fig = plot_runs.plot_trajectory(nan_results[1], runs=(0, 1))
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "training step"
    assert "log2" in ax.get_ylabel()
    labels = _legend_labels(ax.get_legend())
    assert any("safe band" in s for s in labels) and any("bad batch" in s for s in labels)
    _check_png(plot_common.save_figure(fig, tmp_path / "traj.png"), 800, 450)


def test_trajectory_legend_is_outside_and_markers_are_not_clipped(stationary):
    fig = plot_runs.plot_trajectory(stationary[1])  # pytorch: overflows at steps 0 and 1
    ax = fig.axes[0]
    assert _extent(fig, ax.get_legend()).x0 > ax.get_window_extent().x1
    marker = _line(ax, "overflow")
    assert marker.get_xdata()[0] == 0 and not marker.get_clip_on()
    assert ax.get_xlim()[0] < 0  # a margin left of step 0
    assert marker.get_ydata()[0] == 2.0**15


def test_jumpy_scale_is_thin_with_a_rolling_median(stationary):
    headroom = stationary[3]
    ax = plot_runs.plot_trajectory(headroom).axes[0]
    thin = _line(ax, "each step")
    median = _line(ax, "rolling median")
    assert thin.get_linewidth() < 1 < median.get_linewidth()
    assert "of 21 steps" in median.get_label()  # 2000 steps: about 1%, odd
    y = median.get_ydata()
    s = headroom.scale[:, 0]
    assert y.shape == s.shape and s.min() <= y.min() and y.max() <= s.max()
    assert np.count_nonzero(np.diff(y)) < np.count_nonzero(np.diff(s)) / 5
    # a policy that rarely changes keeps its one plain line
    labels = [ln.get_label() for ln in plot_runs.plot_trajectory(stationary[1]).axes[0].get_lines()]
    assert "scale" in labels and not any("median" in s for s in labels)


def test_safe_band_says_whether_it_is_capped(ssd):
    legacy, pytorch = ssd[0], ssd[1]
    band = _legend_labels(plot_runs.plot_trajectory(legacy).axes[0].get_legend())[0]
    assert "no max_scale: not capped" in band
    band = _legend_labels(plot_runs.plot_trajectory(pytorch).axes[0].get_legend())[0]
    assert "capped at max_scale $2^{15}$" in band
    top = plot_runs.plot_trajectory(pytorch).axes[0].collections[0].get_paths()[0].vertices[:, 1]
    assert top.max() == 2.0**15


def test_flat_and_coinciding_trajectories_are_noted(tmp_path, ssd):
    fig = plot_runs.plot_trajectory_panels(ssd)
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == [f"{n} on ssd (run 0)" for n in NAMES]
    notes = [_legend_labels(ax.get_legend()) for ax in axes]
    assert "scale flat at $2^{3}$, all 300 steps" in notes[0]
    assert "safe scale flat at $2^{15}$ = max_scale" in notes[1]
    assert "same scale at every step\nas pytorch" in notes[2]
    assert not any("same scale" in s for s in notes[3])  # headroom starts at 2^10
    low, high = axes[1].get_ylim()
    assert low < 2.0**14 and high > 2.0**15  # a flat line is not drawn on the frame
    one = plot_runs.plot_trajectory(ssd[1], runs=(0, 1)).axes[0]
    assert "runs 0, 1 coincide" in _legend_labels(one.get_legend())
    _check_png(plot_common.save_figure(fig, tmp_path / "panels.png"), 1100, 960)


# ---------------------------------------------------------------- histograms


def test_histogram_png_with_windows(tmp_path):
    trace = make_trace("ssd", steps=50)
    fig = plot_gradients.plot_histogram(trace, scales=(1.0, 8.0, 2.0**15))
    ax = fig.axes[0]
    labels = _legend_labels(ax.get_legend())
    assert labels[:3] == [
        "scale $2^{0}$: [$2^{-24}$, 65504$\\cdot$$2^{0}$]",
        "scale $2^{3}$: [$2^{-27}$, 65504$\\cdot$$2^{-3}$]",
        "scale $2^{15}$: [$2^{-39}$, 65504$\\cdot$$2^{-15}$]",
    ]
    assert any("exact zeros: 66.8%" in s for s in labels)
    assert ax.get_yscale() == "log"
    assert [ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_linestyle() == "--"] == [
        -24,
        -27,
        -39,
    ]
    _check_png(plot_common.save_figure(fig, tmp_path / "hist.png"), 800, 500)
    fig = plot_gradients.plot_histogram(trace, step=3, figsize=(6.0, 4.0))
    _check_png(plot_common.save_figure(fig, tmp_path / "hist_step.png"), 600, 400)


def test_histogram_colours_are_fixed_per_scale_and_the_legend_is_below():
    def colours(fig):
        ax = fig.axes[0]
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
        assert a[name] == b[name] == to_hex(plot_common.scale_color(2.0**k))
    assert len(set(a.values())) == 3 and len(set(b.values())) == 3
    ax = ssd.axes[0]
    assert _extent(ssd, ax.get_legend()).y1 < ax.get_window_extent().y0


# ---------------------------------------------------------------- underflow against scale


def test_underflow_vs_scale_png(tmp_path):
    values = sample_values(ssd_binade_shares(), 2**14, SSD_ZERO_SHARE)
    sources = {"stationary": make_trace("stationary", steps=100), "ssd values": values}
    fig = plot_gradients.plot_underflow_vs_scale(sources, exponents=range(0, 20))
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    labels = _legend_labels(ax.get_legend())
    assert labels[0] == "stationary (0 from $2^{13}$ on)"  # says why the line ends
    assert labels[-1].startswith("vertical line: the largest gradient overflows")
    assert _extent(fig, ax.get_legend()).y1 < ax.get_window_extent().y0
    curves = [ln for ln in ax.get_lines() if ln.get_label().split(" (")[0] in sources]
    assert len({(ln.get_linestyle(), ln.get_marker()) for ln in curves}) == 2
    assert all(ln.get_markerfacecolor() == "none" for ln in curves)
    # the overflow limit of the stationary trace: a vertical line, pale curve from there
    limit = plot_gradients.first_overflow_scale(sources["stationary"])
    assert limit == FP16_OVERFLOW / sources["stationary"].absmax.max()
    vertical = [ln for ln in ax.get_lines() if list(ln.get_xdata()) == [limit, limit]]
    assert len(vertical) == 1 and to_hex(vertical[0].get_color()) == to_hex(curves[0].get_color())
    solid = curves[0].get_xdata()
    assert np.nanmax(solid) < limit
    pale = [ln for ln in ax.get_lines() if ln.get_alpha() == 0.3][0]
    assert np.nanmax(pale.get_xdata()) > limit
    _check_png(plot_common.save_figure(fig, tmp_path / "under.png"), 800, 550)
    # the curve for values is float16's exact flushed share
    curve = plot_gradients.underflow_curve(values, [0, 3])
    assert 0.9 < curve[0] < 1.0 and curve[1] < curve[0]
    assert plot_gradients.first_overflow_scale(values) == FP16_OVERFLOW / np.abs(values).max()


# ---------------------------------------------------------------- policy comparison


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
    fig = plot_runs.plot_policy_comparison(rows, "skipped")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["nan", "stationary"]
    assert len(ax.containers) == 3  # one dot series per policy (missing ones are NaN)
    assert ax.get_yscale() == "linear" and ax.get_title().endswith(", lower is better")
    _check_png(plot_common.save_figure(fig, tmp_path / "cmp.png"), 900, 450)


def test_policy_comparison_shows_the_spread_over_runs(nan_results):
    fig = plot_runs.plot_policy_comparison(nan_results, "signal_lost")
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    assert ax.get_title() == plot_runs.METRIC_LABELS["signal_lost"] + ", lower is better"
    for container, r in zip(ax.containers, nan_results):
        assert container.get_label() == r.label
        (dot_x,), (dot_y,) = container.lines[0].get_data()
        assert dot_y == pytest.approx(r.summary()["signal_lost"])
        (segment,) = container.lines[2][0].get_segments()
        per_run = r.metrics["signal_lost"]
        assert segment[:, 1] == pytest.approx([per_run.min(), per_run.max()])
    assert plot_runs.SPREAD_NOTE.replace("; ", "\n") == ax.get_legend().get_title().get_text()


def test_all_zero_groups_and_zeros_on_a_log_axis_are_written(ssd):
    rows = [{"trace": "ssd", "label": r.label, "skipped": 0.0} for r in ssd]
    rows += [{"trace": "stationary", "label": "pytorch", "skipped": 5.0}]
    ax = plot_runs.plot_policy_comparison(rows, "skipped").axes[0]
    assert "all 0" in [t.get_text() for t in ax.texts]
    rows = [{"trace": "a", "label": "p", "signal_lost": 0.0}]
    rows += [{"trace": "a", "label": "q", "signal_lost": 0.01}]
    ax = plot_runs.plot_policy_comparison(rows, "signal_lost").axes[0]
    assert [t.get_text() for t in ax.texts] == ["0"]
    assert ax.texts[0].get_position()[0] < 0  # at p's dot position


def test_comparison_panels_share_one_legend_above(tmp_path, ssd, nan_results):
    fig = plot_runs.plot_comparison_panels([*ssd, *nan_results])
    assert len(fig.axes) == 4 and len(fig.legends) == 1
    assert plot_runs.SPREAD_NOTE in fig.legends[0].get_title().get_text()
    assert [ax.get_yscale() for ax in fig.axes] == ["log", "linear", "log", "linear"]
    assert all("lower is better" in ax.get_title() for ax in fig.axes)
    _check_png(plot_common.save_figure(fig, tmp_path / "panels.png"), 1400, 850)


# ---------------------------------------------------------------- shared conventions


def test_functions_draw_on_a_given_axes(tmp_path):
    fig = Figure(figsize=(10.0, 4.0), dpi=plot_common.DPI)
    left, right = fig.subplots(1, 2)
    trace = make_trace("drifting", steps=400)
    result = simulate(PRESETS["pytorch"], trace, runs=1)
    assert plot_runs.plot_trajectory(result, ax=left) is fig
    assert plot_gradients.plot_histogram(trace, ax=right) is fig
    _check_png(plot_common.save_figure(fig, tmp_path / "both.png"), 1000, 400)


def test_demo_plot_draws_the_float16_max_at_65504(tmp_path):
    from sim.nnabla_studies.demo import plot_scale_trajectories

    scales = [2.0**10] * 5 + [2.0**16, 2.0**15, 2.0**15]
    rows = [
        {"variant": "float16 + nnabla updater", "_scales": scales, "_skipped_at": [5]},
        {"variant": "float16 + this updater", "_scales": scales[:5] * 2, "_skipped_at": []},
    ]
    fig = plot_scale_trajectories(rows, tmp_path / "train.png")
    ax = fig.axes[0]
    (limit,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == ":"]
    assert list(limit.get_ydata()) == [math.log2(65504.0)] * 2
    (note,) = [t for t in ax.texts if "65504" in t.get_text()]
    assert "float16 max 65504 = $2^{15.9993}$" in note.get_text()
    _check_png(tmp_path / "train.png", 800, 450)


def test_bad_arguments(nan_results):
    with pytest.raises(ValueError, match="runs"):
        plot_runs.plot_trajectory(nan_results[0], runs=(5,))
    with pytest.raises(ValueError, match="metric"):
        plot_runs.plot_policy_comparison([nan_results[0].summary()], "speed")
    with pytest.raises(ValueError, match="yscale"):
        plot_runs.plot_policy_comparison([nan_results[0].summary()], yscale="symlog")
    with pytest.raises(ValueError, match="step"):
        plot_gradients.plot_histogram(make_trace("stationary", steps=5), step=5)
    with pytest.raises(ValueError, match="sources"):
        plot_gradients.plot_underflow_vs_scale({})
    with pytest.raises(ValueError, match="results"):
        plot_runs.plot_trajectory_panels([])
