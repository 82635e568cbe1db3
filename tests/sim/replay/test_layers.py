"""Per-layer underflow (sim/replay/layers.py) and its figure (sim/plots/layers.py) on constructed
traces whose answers follow from the binade model: binade ``e`` is flushed at scale ``2**k`` iff
``e + k <= -26``, and the largest safe scale is the largest ``2**k`` with
``absmax * 2**k <= 65504``."""

import numpy as np
import pytest

from sim.casting.underflow import pooled_flushed_share
from sim.plots.layers import plot_layer_flush
from sim.replay.layers import (
    WHOLE_MODEL,
    format_layer_needs,
    layer_flushed_curves,
    layer_needs,
    layer_view,
)
from updater.trace import Trace
from updater.trace.recorder import GradientRecorder

SMALL = 1.5 * 2.0**-30  # binade -30: flushed at 2**4, kept at 2**5 (in float16 too)
LARGE = 4096.0  # binade 12: needs 2**-37; 4096 * 2**3 <= 65504 < 4096 * 2**4


def _trace(steps, name="model"):
    """A per-parameter trace; ``steps`` is a list of dicts name -> values (scale 1)."""
    rec = GradientRecorder("unused.npz", name=name, per_parameter=True)
    rec._exit_hook.detach()
    for t, arrays in enumerate(steps):
        rec.record(t, [np.asarray(v, np.float64) for v in arrays.values()], 1.0, names=list(arrays))
    return rec.trace()


def _by_layer(rows):
    return {r["layer"]: r for r in rows}


def test_needs_and_largest_safe_scales_follow_the_binade_model():
    step = {"small/W": [SMALL] * 3 + [0.0], "large/W": [LARGE, -LARGE], "zero/b": [0.0, 0.0]}
    rows = layer_needs(_trace([step] * 10), stages=[("all", 0.0, 1.0)])
    assert [r["layer"] for r in rows] == ["large/W", "small/W", "zero/b", WHOLE_MODEL]
    got = {r["layer"]: (r["values"], r["stages"][0].need, r["stages"][0].safe) for r in rows}
    assert got == {
        "small/W": (4, 5, 45),  # 65504 / SMALL = 1.36 * 2**45
        "large/W": (2, -37, 3),
        "zero/b": (2, None, None),
        WHOLE_MODEL: (8, 5, 3),  # the small values are 3/5 of the nonzero ones
    }
    assert rows[2]["stages"][0].reason == "no nonzero values"
    assert all(r["stages"][0].steps == 10 for r in rows)
    text = format_layer_needs(rows)
    assert "| `small/W` | 4 | 2^5 | 2^45 |" in text
    assert "| `zero/b` | 2 | n/a (no nonzero values) | any |" in text
    assert "- all: no single scale serves every layer: `small/W` needs 2^5, `large/W` " in text


def _need(values, tolerance):
    rows = layer_needs(_trace([{"w": values}]), tolerance=tolerance, stages=[("all", 0, 1)])
    return rows[0]["stages"][0].need


def test_the_tolerance_decides_the_need():
    # 1 or 2 tiny values (binade -40, flushed up to 2**14) among 1000 of binade 0 (up to 2**-26)
    one = [2.0**-40] + [1.0] * 999
    two = [2.0**-40] * 2 + [1.0] * 998
    assert (_need(one, 1e-3), _need(one, 1e-4)) == (-25, 15)
    assert (_need(two, 1e-3), _need(two, 2e-3), _need(two, 1e-4)) == (15, -25, 15)


def test_stages_see_their_own_steps_and_overflowed_steps_are_left_out():
    # 20 steps whose values grow one binade per step: step t is in binade -30 + t
    steps = [{"w": [1.5 * 2.0 ** (-30 + t)], "b": [1.0]} for t in range(20)]
    trace = _trace(steps)
    rows = _by_layer(layer_needs(trace))
    w = rows["w"]["stages"]
    assert [(s.stage, s.steps) for s in w] == [("early", 2), ("mid", 2), ("late", 2)]
    # early: binades -30 and -29 -> 2**5; mid (steps 9, 10): -21, -20 -> 2**-4; late: -12, -11
    assert [s.need for s in w] == [5, -4, -13]
    assert [s.safe for s in w] == [44, 35, 26]  # from the stage's largest value
    # an overflow at step 19 leaves the late stage with step 18 alone (binade -12)
    trace.overflow_scale[19] = 8.0
    late = _by_layer(layer_needs(trace))["w"]["stages"][2]
    assert (late.steps, late.need, late.safe) == (1, -13, 27)


def test_values_below_the_binade_range_never_reach_the_tolerance():
    row = layer_needs(_trace([{"w": [1e-30, 1.0]}]), stages=[("all", 0, 1)])[0]
    assert row["stages"][0].need is None
    assert row["stages"][0].reason == "above 2**54 (values below 2**-79)"


def test_flushed_curves_are_the_pooled_shares_of_each_layer():
    trace = _trace([{"a": [SMALL, 1.0], "b": [LARGE]}, {"a": [2.0**-20], "b": [2.0**-28]}])
    scales = 2.0 ** np.arange(0, 10)
    curves = layer_flushed_curves(trace, scales)
    assert curves.shape == (2, 10)
    np.testing.assert_array_equal(curves[0], pooled_flushed_share(layer_view(trace, 0), scales))
    assert curves[0, [4, 5]].tolist() == [1 / 3, 0.0]
    assert curves[1, [2, 3]].tolist() == [0.5, 0.0]  # binade -28 is kept from 2**3 on
    second = layer_flushed_curves(trace, [2.0**2, 2.0**3, 2.0**4], steps=slice(1, 2))
    assert second.tolist() == [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]


def test_a_trace_without_layers_is_refused_with_a_hint():
    plain = Trace.from_steps([[1.0, 2.0]])
    with pytest.raises(ValueError, match="per_parameter=True"):
        layer_needs(plain)
    with pytest.raises(ValueError, match="tolerance must be a number in"):
        layer_needs(_trace([{"w": [1.0]}]), tolerance=1.0)


def test_the_figure_has_one_line_per_layer_and_the_whole_model(tmp_path):
    from sim.plots.common import save_figure

    a = _trace([{"small/W": [SMALL, 2.0**-10], "small/b": [2.0**-3]}] * 3, name="first")
    b = _trace([{"x/W": [2.0**-27, 1.0], "y/W": [LARGE], "y/b": [0.0]}] * 2, name="second")
    fig = plot_layer_flush([a, b])
    path = save_figure(fig, tmp_path / "layers.png")
    assert path.stat().st_size > 10_000
    axes = fig.axes
    assert len(axes) == 2
    for ax, trace in zip(axes, (a, b)):
        assert ax.get_title(loc="left").startswith(trace.name + ":")
        names = sorted(trace.layer_names) + ["whole model"]
        labels = [line.get_label().split(":")[0] for line in ax.get_lines()]
        assert [x for x in labels if x in names] == names  # one line each, in this order
        whole = [x for x in ax.get_lines() if x.get_label().startswith("whole model")][0]
        assert whole.get_color() == "black" and whole.get_linewidth() == 3.0
        assert ax.get_legend() is not None
    assert "small/W: $2^{5}$" in [t.get_text() for t in axes[0].get_legend().get_texts()]
    assert "flushed to zero" in axes[0].get_ylabel() and axes[1].get_xlabel() == "loss scale"


def test_a_probed_trace_keeps_its_steps_with_finite_thresholds():
    """In a probed trace a finite overflow_scale is a measured threshold and the step's
    histogram is of finite gradients: the step stays clean; unprobed, it was an overflow."""
    from sim.replay.layers import clean_steps

    t = Trace.from_steps([[1.0, 2.0]] * 3)
    over = [np.inf, 2.0**14, np.inf]
    probed = Trace(
        t.counts, t.zeros, t.absmax, t.nonfinite, overflow_scale=over, overflow_probed=True
    )
    seen = Trace(t.counts, t.zeros, t.absmax, t.nonfinite, overflow_scale=over)
    assert clean_steps(probed).tolist() == [0, 1, 2]
    assert clean_steps(seen).tolist() == [0, 2]
