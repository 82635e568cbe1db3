"""The digits demo: four variants train, the table renders, the trajectory PNG is written."""

import math
import re

import matplotlib.image as mpimg
import nnabla as nn
import pytest

from sim.nnabla_studies.demo import PLOT_NAME, VARIANTS, format_table, load_data, run_comparison

pytestmark = [pytest.mark.nnabla, pytest.mark.slow]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    rows = run_comparison(steps=12, seed=0, out_dir=out, progress=False, probe_every=3)
    return rows, out


def test_rows_cover_the_four_variants_with_sane_numbers(demo):
    rows, _ = demo
    assert [r["variant"] for r in rows] == [label for _, label in VARIANTS]
    for r in rows:
        assert 0.0 <= r["test_accuracy"] <= 1.0
        assert r["batches"] >= 12 and r["skipped_steps"] >= 0 and r["seconds"] > 0
        assert 0.0 <= r["flushed_share"] <= 1.0
        assert len(r["_scales"]) == 12
    float32, plain, theirs, ours = rows
    assert float32["flushed_share"] == 0.0
    # float16 without scaling loses most gradient values; scaling keeps nearly all
    assert plain["flushed_share"] > 0.9
    assert ours["flushed_share"] < 0.2 and theirs["flushed_share"] < 0.2
    assert ours["batches"] == 12 and ours["final_scale"] == 2.0**10


def test_table_is_markdown_with_one_line_per_variant(demo):
    rows, _ = demo
    lines = format_table(rows).split("\n")
    assert len(lines) == 2 + len(rows)
    assert lines[0].startswith("| variant | test accuracy | skipped steps | batches consumed")
    assert all(line.count("|") == lines[0].count("|") for line in lines)
    assert f"{100 * rows[3]['test_accuracy']:.1f}%" in lines[5]


def test_scale_trajectory_png_is_written(demo):
    _, out = demo
    image = mpimg.imread(out / PLOT_NAME)
    assert image.shape[:2] == (450, 800)
    assert image[..., :3].std() > 0.05  # not blank


def test_demo_leaves_no_parameters_behind(demo):
    assert not any(k.startswith("dls_demo/") for k in nn.get_parameters(grad_only=False))


def test_data_is_the_bundled_digits_split_80_20():
    x_train, y_train, x_test, y_test = load_data(0)
    assert x_train.shape[1] == x_test.shape[1] == 64
    assert len(x_train) + len(x_test) == 1797 and len(x_test) == 1797 // 5
    assert 0.0 <= x_train.min() and x_train.max() <= 1.0
    assert set(y_train) == set(range(10))


@pytest.mark.parametrize(
    "kwargs,fragment",
    [
        ({"steps": 0}, "steps must be an int >= 1, got 0"),
        ({"steps": 2.5}, "steps must be an int >= 1, got 2.5"),
        ({"seed": -1}, "seed must be an int in [0, 4294967295], got -1"),
        ({"seed": 2**32}, "seed must be an int in [0, 4294967295], got 4294967296"),
        ({"probe_every": 0}, "probe_every must be an int >= 1 or None, got 0"),
        ({"loss_weight": math.inf}, "loss_weight must be a finite number > 0, got inf"),
    ],
)
def test_bad_arguments(kwargs, fragment):
    with pytest.raises(ValueError, match=re.escape(fragment)):
        run_comparison(out_dir=None, progress=False, **kwargs)


@pytest.mark.slow
def test_float16_with_our_updater_matches_float32_accuracy_and_unscaled_float16_loses():
    """The issue's acceptance: within 1 point of float32; float16 without scaling loses signal."""
    rows = {
        r["variant"]: r for r in run_comparison(steps=300, seed=0, out_dir=None, progress=False)
    }
    f32, plain, ours = (rows[label] for label in (VARIANTS[0][1], VARIANTS[1][1], VARIANTS[3][1]))
    assert abs(ours["test_accuracy"] - f32["test_accuracy"]) <= 0.01
    assert plain["flushed_share"] > 0.5
    assert plain["test_accuracy"] < f32["test_accuracy"] - 0.05
    assert ours["skipped_steps"] <= 3 and ours["batches"] == 300
