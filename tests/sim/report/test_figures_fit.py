"""Every figure the report and the digits demo write keeps its texts inside the canvas
(issue 31: layers_flush.png clipped its panel titles and y-label at the left edge)."""

import matplotlib.text
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from sim.nnabla_studies.demo import plot_scale_trajectories
from sim.plots.common import save_figure
from sim.report.experiments import QUICK, compare, load_real_traces, make_traces, ssd_sample
from sim.report.figures import figure_plan


def texts_outside(fig, path):
    """Save ``fig`` to ``path`` (Agg) and return the drawn texts whose tight bounding box
    leaves the figure (1 pixel of slack)."""
    FigureCanvasAgg(fig)  # the figure's canvas is Agg from here on
    save_figure(fig, path)
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    out, undrawn = [], set()
    for ax in fig.axes:  # tick labels of ticks outside the view are kept but not drawn
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in [*axis.majorTicks, *axis.minorTicks]:
                if not low - 1e-9 <= tick.get_loc() <= high + 1e-9:
                    undrawn.update({id(tick.label1), id(tick.label2)})
    for text in fig.findobj(matplotlib.text.Text):
        if id(text) in undrawn or not (text.get_visible() and text.get_text().strip()):
            continue
        box = text.get_tightbbox(renderer)
        if box is None or box.width == 0:
            continue
        if (
            box.x0 < canvas.x0 - 1
            or box.y0 < canvas.y0 - 1
            or box.x1 > canvas.x1 + 1
            or box.y1 > canvas.y1 + 1
        ):
            out.append(text.get_text())
    whole = fig.get_tightbbox(renderer)  # inches; every drawn artist, tick labels included
    if (
        whole.x0 < -0.01
        or whole.y0 < -0.01
        or whole.x1 > fig.get_figwidth() + 0.01
        or (whole.y1 > fig.get_figheight() + 0.01)
    ):
        out.append(f"the figure's tight box {whole.bounds}")
    return out


@pytest.fixture(scope="module")
def figures():
    traces = {**make_traces(QUICK), **load_real_traces(QUICK)}
    results = compare(traces, QUICK, None).results
    values = ssd_sample(QUICK)
    figs = {name: draw(results, values) for name, draw in figure_plan(traces).items()}
    scales = [2.0**10] * 50 + [2.0**16] + [2.0**15] * 49
    rows = [
        {"variant": "float16 + nnabla updater", "_scales": scales, "_skipped_at": [50]},
        {"variant": "float16 + this updater", "_scales": scales[:50] * 2, "_skipped_at": []},
    ]
    figs["train_scale_trajectory.png"] = plot_scale_trajectories(rows, None)
    return figs


def test_the_report_draws_every_figure(figures):
    names = {"layers_flush.png", "policy_comparison.png", "underflow_vs_scale.png"}
    assert names <= set(figures) and "trajectories_digits_conv_bn.png" in figures


@pytest.mark.parametrize(
    "name",
    [
        "trajectories_stationary.png",
        "trajectories_nan.png",
        "trajectories_ssd.png",
        "trajectories_digits_conv_bn.png",
        "trajectories_sequence_attention.png",
        "policy_comparison.png",
        "histogram_ssd.png",
        "histogram_drifting_end.png",
        "underflow_vs_scale.png",
        "layers_flush.png",
        "train_scale_trajectory.png",
    ],
)
def test_every_text_lies_inside_the_canvas(figures, name, tmp_path):
    assert texts_outside(figures[name], tmp_path / name) == []
