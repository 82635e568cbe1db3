"""The figure defects of issue 41, item 8, each checked on the drawn figure: a panel title cut at
the right edge, a tick at step 0 under "training step (1 = first)", the smoothing sentence in
figures where nothing is smoothed, two "overflows from here" lines drawn on top of each other,
"0 from 2^29 on" past the overflow, and shares plotted as fractions while the tables print %."""

import pytest

from sim.plots.gradients import first_overflow_scale, plot_underflow_vs_scale
from sim.plots.trajectories import TITLE_WIDTH, plot_trajectory, plot_trajectory_panels
from sim.replay.run import simulate
from sim.traces.families import make_trace
from updater import PRESETS


@pytest.fixture(scope="module")
def nan_results():
    trace = make_trace("nan", steps=3000)
    return [
        simulate(PRESETS[n], trace, runs=2, label=n) for n in ("dynamic", "pytorch", "headroom")
    ]


def _texts(fig):
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]


def test_long_panel_titles_wrap_within_the_panel(nan_results):
    fig = plot_trajectory_panels(nan_results)
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    long = [t for t in titles if "\n" in t]
    assert long, titles  # "dynamic, pytorch: the same scale at every step (...)" wraps
    assert all(len(line) <= TITLE_WIDTH for t in titles for line in t.splitlines())
    fig.canvas.draw()
    for ax in fig.axes:
        title = ax.title if ax.get_title() else ax._left_title
        assert title.get_window_extent().x1 <= fig.bbox.x1  # nothing cut at the right edge


def test_no_tick_at_step_0(nan_results):
    for fig in (plot_trajectory_panels(nan_results), plot_trajectory(nan_results[0])):
        for ax in fig.axes:
            ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
            assert (
                ticks and min(ticks) >= 1 and ax.get_xlabel() in ("", "training step (1 = first)")
            )


def test_the_smoothing_sentence_only_where_a_line_is_smoothed(nan_results):
    flat = plot_trajectory_panels(nan_results[:2])  # dynamic, pytorch: no jumpy line
    jumpy = plot_trajectory_panels(nan_results)  # headroom changes scale on many steps
    assert not any("smoothing:" in t for t in _texts(flat))
    assert any("smoothing:" in t for t in _texts(jumpy))
    assert not any("smoothing:" in t for t in _texts(plot_trajectory(nan_results[0])))


def test_underflow_vs_scale_draws_one_line_per_limit_and_percent_ticks():
    sources = {f: make_trace(f, steps=2000) for f in ("stationary", "drifting")}
    limits = {f: first_overflow_scale(t) for f, t in sources.items()}
    assert limits["stationary"] == limits["drifting"]  # the case: two limits coincide
    fig = plot_underflow_vs_scale(sources)
    ax = fig.axes[0]
    vertical = [
        ln for ln in ax.get_lines() if len(set(ln.get_xdata())) == 1 and len(ln.get_xdata()) == 2
    ]
    assert len(vertical) == 1
    tops = [ln for ln in ax.get_lines() if list(ln.get_xdata()) == [limits["stationary"]]]
    assert len(tops) == 2  # both markers stack on the one line
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "drifting" in labels  # its share reaches 0 only past the overflow: not stated
    fig.canvas.draw()
    ticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert ticks and all(t.endswith("%") for t in ticks) and "100%" in ticks
    assert ax.get_ylabel() == "nonzero values flushed to 0 (%)"
