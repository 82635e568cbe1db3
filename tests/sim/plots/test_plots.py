"""Figures of sim/plots/runs.py, sim/plots/gradients.py and the demo, and the figure files of
sim/plots/common.py: what each draws, checked on its artists, and that it renders to a real file
of the expected size and format."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from sim.plots import common as plot_common
from sim.plots import gradients as plot_gradients
from sim.plots import runs as plot_runs
from sim.plots import style
from sim.plots import trajectories as plot_traj
from sim.replay.run import simulate, simulate_many
from sim.traces.families import make_trace
from tests.sim.plots.drawn import check_png, extent, legend_labels
from updater.policy.presets import PRESETS, make_policy

NAMES = ["nnabla-legacy", "pytorch", "dynamic", "headroom"]


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
    fig = plot_traj.plot_trajectory(ssd[2])
    magic = {"png": b"\x89PNG", "pdf": b"%PDF", "svg": b"<?xml", "jpg": b"\xff\xd8"}
    for fmt, head in magic.items():
        path = plot_common.save_figure(fig, tmp_path / f"t.{fmt}")
        assert path.read_bytes().startswith(head)
    assert b"Matplotlib v" not in (tmp_path / "t.pdf").read_bytes()
    first = (tmp_path / "t.png").read_bytes()
    again = plot_traj.plot_trajectory(ssd[2])  # a rerun makes the figure anew
    assert plot_common.save_figure(again, tmp_path / "t.png").read_bytes() == first
    with pytest.raises(ValueError, match="xyz"):
        plot_common.save_figure(fig, tmp_path / "t.xyz")
    assert not (tmp_path / "t.xyz").exists()


# ---------------------------------------------------------------- trajectories


def test_trajectory_png(tmp_path, nan_results):
    fig = plot_traj.plot_trajectory(nan_results[1], runs=(0, 1))
    ax = fig.axes[0]
    assert ax.get_xlabel() == "training step (1 = first)" and ax.get_ylabel() == "loss scale"
    assert all(t.get_text().startswith("$2^{") for t in ax.get_yticklabels())
    labels = legend_labels(ax.get_legend())
    assert any("safe band" in s for s in labels) and any("bad batch" in s for s in labels)
    assert "run 1, 2 of 3" in ax.get_title()
    check_png(plot_common.save_figure(fig, tmp_path / "traj.png"), 800, 450)


def test_trajectory_legend_is_outside_and_markers_are_not_clipped(stationary):
    fig = plot_traj.plot_trajectory(stationary[1])  # pytorch: overflows at steps 1 and 2
    ax = fig.axes[0]
    assert extent(fig, ax.get_legend()).x0 > ax.get_window_extent().x1
    (marker,) = [ln for ln in ax.get_lines() if ln.get_marker() == style.OVERFLOW.marker]
    assert marker.get_xdata()[0] == 1 and not marker.get_clip_on()  # steps count from 1
    assert ax.get_xlim()[0] < 1
    assert marker.get_ydata()[0] == 15  # log2 of the scale, labelled 2^15


def test_one_smoothing_rule_stated_in_the_figure(stationary):
    headroom = stationary[3]
    fig = plot_traj.plot_trajectory(headroom)
    ax = fig.axes[0]
    lines = [ln for ln in ax.get_lines() if ln.get_color() == style.POLICY_LOOKS["headroom"].color]
    thin, median = sorted(lines, key=lambda ln: ln.get_linewidth())
    assert thin.get_linewidth() < 1 < median.get_linewidth()
    assert plot_traj.smoothing_window(2000) == 21  # 1% of the run, odd
    assert "1% of the run (21 steps" in ax.get_legend().get_title().get_text().replace("\n", " ")
    y = median.get_ydata()
    s = np.log2(headroom.scale[:, 0])
    assert y.shape == s.shape and s.min() <= y.min() and y.max() <= s.max()
    assert np.count_nonzero(np.diff(y)) < np.count_nonzero(np.diff(s)) / 5
    panels = plot_traj.plot_trajectory_panels(stationary)
    assert "(21 steps" in panels.legends[0].get_title().get_text()


def test_the_rolling_median_does_not_fall_at_the_last_step():
    # trajectories_digits_conv_bn.png: the median fell to the axis bottom at the last step
    x = np.array([10.0] * 100 + [0.0])
    assert plot_traj.rolling_median(x, 21)[-1] == 10.0
    assert plot_traj.rolling_median(x[::-1], 21)[0] == 10.0


def test_safe_band_says_whether_it_is_capped(ssd):
    legacy, pytorch = ssd[0], ssd[1]
    assert (
        "safe band not capped (no max_scale)"
        in plot_traj.plot_trajectory(legacy).axes[0].get_title()
    )
    ax = plot_traj.plot_trajectory(pytorch).axes[0]
    assert "safe band capped at max_scale $2^{15}$" in ax.get_title()
    assert ax.collections[0].get_paths()[0].vertices[:, 1].max() == 15


def test_panels_share_one_range_one_legend_and_merge_identical_runs(tmp_path, ssd):
    fig = plot_traj.plot_trajectory_panels(ssd)
    axes = fig.axes
    titles = [ax.get_title(loc="left") for ax in axes]
    assert titles[0].startswith("nnabla-legacy: flat at $2^{3}$ (0 overflows")
    assert titles[1].startswith("pytorch, dynamic: flat at $2^{15}$ (0 overflows")
    assert "lines drawn 0.15 binade apart" in titles[1]
    assert titles[2].startswith("headroom")  # starts at 2^10
    assert len({ax.get_ylim() for ax in axes}) == 1
    assert len({tuple(ax.get_yticks()) for ax in axes}) == 1
    assert all(ax.get_legend() is None for ax in axes) and len(fig.legends) == 1
    assert "run 1 of 2" in fig.legends[0].get_title().get_text()
    a, b = axes[1].get_lines()[:2]  # pytorch, dynamic
    assert np.ptp(a.get_ydata()) == 0 and abs(a.get_ydata()[0] - b.get_ydata()[0]) == pytest.approx(
        0.15
    )
    check_png(plot_common.save_figure(fig, tmp_path / "panels.png"), 1000, 730)


def test_dense_overflows_are_a_rug():
    # trajectories_digits_conv_bn.png: 155 markers merged into a line
    every = simulate(make_policy("static", scale=2.0**15), make_trace("stationary", steps=200))
    ax = plot_traj.plot_trajectory(every).axes[0]
    assert not [ln for ln in ax.get_lines() if ln.get_marker() == style.OVERFLOW.marker]
    (rug,) = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(rug.get_segments()) == 200 and "200 overflows (rug at the top)" in ax.get_title()


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
    check_png(plot_common.save_figure(fig, tmp_path / "cmp.png"), 900, 450)


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
    # policies that coincide are named (pytorch and dynamic on ssd)
    assert plot_runs.coincide_notes(ssd, ["signal_lost", "skipped"]) == [
        "pytorch, dynamic: equal in every family (dots side by side)"
    ]
    markers = {c.lines[0].get_marker() for c in fig.axes[0].containers}
    assert len(markers) == 4  # every policy its own marker, not colour alone
    assert [ax.get_yscale() for ax in fig.axes] == ["log", "linear", "log", "linear"]
    assert all("lower is better" in ax.get_title() for ax in fig.axes)
    check_png(plot_common.save_figure(fig, tmp_path / "panels.png"), 1400, 850)


# ---------------------------------------------------------------- shared conventions


def test_functions_draw_on_a_given_axes(tmp_path):
    fig = Figure(figsize=(10.0, 4.0), dpi=plot_common.DPI)
    left, right = fig.subplots(1, 2)
    trace = make_trace("drifting", steps=400)
    result = simulate(PRESETS["pytorch"], trace, runs=1)
    assert plot_traj.plot_trajectory(result, ax=left) is fig
    assert plot_gradients.plot_histogram(trace, ax=right) is fig
    check_png(plot_common.save_figure(fig, tmp_path / "both.png"), 1000, 400)


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
    check_png(tmp_path / "train.png", 800, 450)


def test_bad_arguments(nan_results):
    with pytest.raises(ValueError, match="runs"):
        plot_traj.plot_trajectory(nan_results[0], runs=(5,))
    with pytest.raises(ValueError, match="metric"):
        plot_runs.plot_policy_comparison([nan_results[0].summary()], "speed")
    with pytest.raises(ValueError, match="yscale"):
        plot_runs.plot_policy_comparison([nan_results[0].summary()], yscale="symlog")
    with pytest.raises(ValueError, match="step"):
        plot_gradients.plot_histogram(make_trace("stationary", steps=5), step=5)
    with pytest.raises(ValueError, match="sources"):
        plot_gradients.plot_underflow_vs_scale({})
    with pytest.raises(ValueError, match="results"):
        plot_traj.plot_trajectory_panels([])
