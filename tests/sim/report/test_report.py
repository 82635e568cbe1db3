"""The simulation report (sim/report/build.py and the modules it runs) and the grid sweep."""

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest

from sim.casting.counts import classify
from sim.cli.main import main
from sim.replay.flush_basis import FLUSH_RUN_METRICS
from sim.replay.metrics import METRICS, SHARES, SUMMARY_COLUMNS
from sim.replay.predictions import prediction_rows
from sim.replay.run import simulate
from sim.replay.selection import choose_defaults, per_setting
from sim.replay.sweep import grid_points, labelled, run_sweep
from sim.report.build import QUICK, build_report, choose
from sim.report.experiments import ReportConfig, load_real_pools, load_real_traces, real_traces_dir
from sim.report.tables import format_percent, format_value, with_percents
from sim.report.text import render
from sim.traces.families import SSD_ZERO_SHARE, make_trace, sample_values, ssd_binade_shares
from sim.traces.real import MODELS, SHIPPED_DIR
from tests.markdown_tables import assert_tables_render, parsed_tables
from tests.paths import SHIPPED_TRACES
from updater.policy.presets import PRESETS, make_policy

SHIPPED = SHIPPED_TRACES


class _Recorder:
    """A stage reporter that records what it is told (the protocol of StageProgress)."""

    def __init__(self):
        self.total, self.stages, self.bars = None, [], []

    def start(self, total):
        self.total = total

    def stage(self, name):
        self.stages.append(name)

    def bar(self, iterable, total, desc):
        self.bars.append((len(self.stages), total))
        return iterable


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    assert main(["report", "--out", str(out), "--quick"]) == 0
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The quick report built again through the library, with a stage recorder."""
    recorder = _Recorder()
    result = build_report(tmp_path_factory.mktemp("again"), QUICK, progress=recorder)
    return result, recorder


def _percent_cells(line):
    return [float(x) / 100 for x in re.findall(r"([0-9.eE+-]+)%", line)]


def _sentences(text):
    """The report's lines that are not table rows."""
    return [line for line in text.splitlines() if not line.startswith("|")]


# ---------------------------------------------------------------- the written report


def test_report_writes_figures_and_readme(quick_report):
    names = sorted(p.name for p in quick_report.iterdir())
    for family in ("stationary", "drifting", "spikes", "nan", "ssd"):
        assert f"trajectories_{family}.png" in names
    for name in ("policy_comparison.png", "histogram_ssd.png", "underflow_vs_scale.png"):
        assert name in names
        assert mpimg.imread(quick_report / name).size > 0
    text = (quick_report / "README.md").read_text()
    for heading in ("## Results on every family", "## Multibox SSD", "## Choosing the defaults"):
        assert heading in text
    for family in ("stationary", "drifting", "spikes", "nan", "ssd"):
        for policy in ("nnabla-legacy", "pytorch", "deepspeed", "dynamic", "headroom"):
            assert f"| {family} | {policy} |" in text


def test_report_ssd_numbers_match_a_direct_float16_cast(quick_report):
    text = (quick_report / "README.md").read_text()
    line = next(x for x in text.splitlines() if x.startswith("| 2^0 | "))
    zeros, flushed_all, flushed_nonzero = _percent_cells(line)[:3]
    values = sample_values(ssd_binade_shares(), QUICK.ssd_values, SSD_ZERO_SHARE, QUICK.seed)
    direct = classify(values, 1.0)
    assert zeros == pytest.approx(direct.zeros_in / direct.total, rel=5e-3)
    assert flushed_all == pytest.approx(direct.flushed / direct.total, rel=5e-3)
    assert flushed_nonzero == pytest.approx(direct.share_flushed, rel=5e-3)


def test_report_policy_row_matches_a_direct_simulation(quick_report):
    text = (quick_report / "README.md").read_text()
    line = next(x for x in text.splitlines() if x.startswith("| ssd | nnabla-legacy |"))
    flushed, lost = _percent_cells(line)[:2]
    trace = make_trace("ssd", steps=QUICK.steps, seed=QUICK.seed)
    direct = simulate(
        PRESETS["nnabla-legacy"], trace, runs=QUICK.runs, seed=QUICK.seed, jitter=QUICK.jitter
    ).summary()
    assert lost == pytest.approx(direct["signal_lost"], rel=5e-3)
    assert flushed == pytest.approx(direct["mean_flushed"], rel=5e-3)


def test_report_is_deterministic_and_names_its_stages(quick_report, built):
    again, recorder = built
    for path in again["files"]:
        assert path.read_bytes() == (quick_report / path.name).read_bytes(), path.name
    # issue 10: every stage is announced with a name, and the total announced up front is right
    # 5 synthetic families and the real traces: 4 stages each; figures, SSD, predictions
    assert recorder.total == len(recorder.stages) == 4 * (5 + len(MODELS)) + 3
    assert "policy comparison on spikes (5 policies)" in recorder.stages
    assert "policy comparison on digits_conv_bn (5 policies)" in recorder.stages
    assert "predictions from the real traces against the real runs" in recorder.stages
    assert "DynamicScale sweep on nan (30 settings, jitter 0.25)" in recorder.stages
    assert all(stage >= 1 for stage, _ in recorder.bars)  # inner loops run inside stages


def test_report_header_names_the_version_and_commit(quick_report, built):
    header = (quick_report / "README.md").read_text().splitlines()[4]
    assert re.match(
        r"Generated by `dls report` with nnabla-dls \S+, code at commit [0-9a-f]{7,}(\+dirty)? ",
        header,
    )
    text = render(built[0]["data"], "nnabla-dls 0.1.0")
    assert text.splitlines()[4].startswith("Generated by `dls report` with nnabla-dls 0.1.0 (")


def test_report_states_what_the_legacy_loss_is(built):
    data = built[0]["data"]
    legacy = data.result("ssd", "nnabla-legacy")
    text = render(data, "abc1234")
    assert (
        f"legacy policy loses {format_percent(legacy['signal_lost'])} of the nonzero gradient "
        f"values over the run (mean over its {QUICK.steps} steps; still "
        f"{format_percent(legacy['lost_end'])} over the last 10% of them"
    ) in text
    assert "reference/" not in text  # cites the notes by what they are, not a missing path


# ---------------------------------------------------------------- the text looks results up by name


def test_text_does_not_depend_on_the_order_of_the_results(built):
    data = built[0]["data"]
    shuffled = dataclasses.replace(
        data,
        compare=data.compare[::-1],
        dynamic_sweep=data.dynamic_sweep[::-1],
        headroom_sweep=data.headroom_sweep[::-1],
    )
    assert _sentences(render(shuffled, "c")) == _sentences(render(data, "c"))


def test_text_names_the_policy_whose_numbers_it_shows(built):
    data = built[0]["data"]
    swap = {"dynamic": "headroom", "headroom": "dynamic"}
    renamed = [{**r, "label": swap.get(r["label"], r["label"])} for r in data.compare]
    text = render(dataclasses.replace(data, compare=renamed), "c")
    was = {n: format_percent(data.result("ssd", n)["signal_lost"]) for n in swap}
    assert f"our current `dynamic` default {was['headroom']} (" in text
    assert f"`headroom` {was['dynamic']}." in text


def test_text_prints_counts_as_counts(built):
    data = built[0]["data"]
    rows = [
        {**r, "skipped": 16.0} if (r["trace"], r["label"]) == ("stationary", "pytorch") else r
        for r in data.compare
    ]
    text = render(dataclasses.replace(data, compare=rows), "c")
    assert "skipped steps per run are 16 (pytorch)" in text  # was 2^4 without a name


# ---------------------------------------------------------------- the rule that picks defaults


def test_choose_rule_prefers_current_defaults_on_ties():
    rows = [
        {"a": 1, "lost_mean": 0.100, "lost_worst": 0.2},
        {"a": 2, "lost_mean": 0.101, "lost_worst": 0.2},
        {"a": 8, "lost_mean": 0.104, "lost_worst": 0.1},
        {"a": 16, "lost_mean": 0.2, "lost_worst": 0.05},
    ]
    assert choose(rows, {"a": 2})["a"] == 8  # within 5% of the best mean, best worst case
    rows[2]["lost_worst"] = 0.2
    assert choose(rows, {"a": 2})["a"] == 2  # a tie (within 3%) keeps the current value
    assert choose(rows, {"a": 16})["a"] == 2  # ... or moves least from it (8 is not a tie)
    assert choose(rows, {"a": 0.5})["a"] == 1


def test_choose_defaults_keeps_headroom_margins_that_meet_the_goal():
    def row(lost, **settings):
        return {**settings, "lost_mean": lost, "lost_worst": lost}

    dynamic = [
        row(0.30, init_scale=2.0**15, growth_interval=2000, hysteresis=1),  # the default
        row(0.10, init_scale=2.0**15, growth_interval=500, hysteresis=1),
    ]
    headroom = [
        row(0.01, margin=8.0, backoff_factor=0.5),  # best, but lands 8x below the safe scale
        row(0.21, margin=1.0, backoff_factor=0.5),
        row(0.20, margin=2.0, backoff_factor=0.5),
        row(0.205, margin=2.0, backoff_factor=2.0**-8),
    ]
    chosen = choose_defaults(dynamic, headroom)
    assert chosen["dynamic"]["growth_interval"] == 500
    # margin 8 is not eligible; 0.205 ties with 0.20 and is the default (backoff 2^-8)
    assert (chosen["headroom"]["margin"], chosen["headroom"]["backoff_factor"]) == (2.0, 2.0**-8)


# ---------------------------------------------------------------- one sweep function


def test_run_sweep_runs_each_grid_point_on_each_trace():
    points = grid_points({"growth_interval": (20, 200), "hysteresis": (1, 2)})
    assert [tuple(p.values()) for p in points] == [(20, 1), (20, 2), (200, 1), (200, 2)]
    policies = [make_policy("dynamic", **p) for p in points]
    made = []

    def traces():  # drawn one at a time
        for family in ("stationary", "nan"):
            made.append(family)
            yield make_trace(family, steps=120, seed=3)

    recorder = _Recorder()
    rows = run_sweep(policies, points, traces(), runs=2, seed=5, jitter=0.5, progress=recorder)
    assert [r["label"] for r in rows] == ["0", "1", "2", "3"] * 2  # the grid point's index
    rows = labelled(rows, "dyn")
    assert made == ["stationary", "nan"]
    assert recorder.stages == [
        "stationary: 4 settings x 2 runs x 120 steps",
        "nan: 4 settings x 2 runs x 120 steps",
    ]
    assert [(r["trace"], r["growth_interval"], r["hysteresis"]) for r in rows] == [
        (f, g, h) for f in ("stationary", "nan") for g in (20, 200) for h in (1, 2)
    ]
    assert {r["label"] for r in rows} == {"dyn"}
    alone = simulate(policies[3], make_trace("nan", steps=120, seed=3), runs=2, seed=5, jitter=0.5)
    expected = alone.summary()
    for key in METRICS:
        assert rows[-1][key] == pytest.approx(expected[key], nan_ok=True), key
    with pytest.raises(ValueError, match="one grid point per policy"):
        run_sweep(policies, points[:2], [], runs=1, seed=0, jitter=0.0)


def test_per_setting_folds_families_into_means_and_worst():
    rows = [
        {"a": 1, "trace": "x", "signal_lost": 0.1, "skipped": 2.0, "mean_flushed": 0.01},
        {"a": 2, "trace": "x", "signal_lost": 0.3, "skipped": 4.0, "mean_flushed": 0.03},
        {"a": 1, "trace": "y", "signal_lost": 0.5, "skipped": 6.0, "mean_flushed": float("nan")},
        {"a": 2, "trace": "y", "signal_lost": 0.1, "skipped": 8.0, "mean_flushed": 0.05},
    ]
    one, two = per_setting(rows, ["a"])
    # what each family's figure rests on, kept for the tables (sim.report.flush_cells)
    assert one.pop("flush_x") == {"signal_lost": 0.1, "mean_flushed": 0.01}
    assert one.pop("flush_y")["signal_lost"] == 0.5
    assert one == {
        "a": 1,
        "lost_x": 0.1,
        "lost_y": 0.5,
        "lost_mean": pytest.approx(0.3),
        "lost_worst": 0.5,
        "skipped_mean": 4.0,
        "flushed_mean": pytest.approx(0.01),
    }
    assert (two["a"], two["lost_worst"], two["skipped_mean"]) == (2, 0.3, 6.0)
    only_x = per_setting(rows, ["a"], families=["x"])  # the synthetic-only fold of the report
    assert [(r["lost_mean"], r["lost_worst"]) for r in only_x] == [(0.1, 0.1), (0.3, 0.3)]
    assert "lost_y" not in only_x[0]


# ---------------------------------------------------------------- metric names and formats


def test_one_list_of_metrics_names_every_summary_column():
    summary = simulate(PRESETS["dynamic"], make_trace("nan", steps=40), runs=2).summary()
    assert set(SUMMARY_COLUMNS) <= set(summary)
    assert SUMMARY_COLUMNS[:3] == ("label", "trace", "runs")
    assert SHARES == ("mean_flushed", "signal_lost", "below_half_safe")
    per_run = simulate(PRESETS["dynamic"], make_trace("nan", steps=40), runs=2).metrics
    own = {n for n, m in METRICS.items() if m.per_run}  # and what the flushed shares rest on
    assert own | set(FLUSH_RUN_METRICS) == set(per_run) and not own & set(FLUSH_RUN_METRICS)
    for name, metric in METRICS.items():  # the kind and the printed form agree
        assert format_value(16.0, name=name) == ("2^4" if metric.kind == "scale" else "16")


def test_percentages_are_formatted_in_one_place():
    rows = [{"signal_lost": 0.12345, "mean_flushed": float("nan"), "label": "x", "skipped": 3.0}]
    assert with_percents(rows, SHARES) == [
        {"signal_lost": "12.3%", "mean_flushed": "n/a", "label": "x", "skipped": 3.0}
    ]
    assert format_percent(4.9e-7) == "<0.001%"  # one format: 3 significant digits, a floor
    assert rows[0]["signal_lost"] == 0.12345  # the input is left alone
    assert format_percent(None) == "n/a" and format_percent(np.float64(1.0)) == "100%"


def test_report_shows_the_real_models_predictions_and_layers(quick_report):
    """Issue 12: the real traces next to the synthetic families, the predictions checked
    against the measured runs (the same numbers as sim.replay.predictions), the per-layer view and
    the defaults with and without the real traces."""
    text = (quick_report / "README.md").read_text()
    assert (quick_report / "layers_flush.png").stat().st_size > 10_000
    assert "![per-layer flushed share against the loss scale](layers_flush.png)" in text
    for model in MODELS:
        assert f"| {model} | dynamic |" in text  # in the policy comparison
        assert f"**{model}**" in text  # its per-layer table
    config = dataclasses.replace(QUICK, real_traces=str(SHIPPED))
    rows = prediction_rows(load_real_pools(config), SHIPPED, QUICK.seed)
    legacy = {
        r["metric"]: r
        for r in rows
        if r["model"] == "digits_mlp" and r["policy"] == "nnabla-legacy"
    }
    row = re.compile(r"\| digits_mlp \| nnabla-legacy \| 2 \| [0-9.]+ \(")  # the predictions
    line = next(x for x in text.splitlines() if row.match(x))
    measured_flushed = _percent_cells(line)[-1]
    assert measured_flushed == pytest.approx(legacy["mean_flushed"]["measured"], rel=5e-3)
    assert "With and without the real traces." in text


def test_the_real_traces_are_the_shipped_ones_unless_a_folder_is_named(tmp_path, monkeypatch):
    assert ReportConfig().real_traces == "shipped" == QUICK.real_traces
    assert real_traces_dir(QUICK) == SHIPPED_DIR == SHIPPED_TRACES
    monkeypatch.chdir(tmp_path)  # a folder given by name is relative to the current one
    (tmp_path / "mine").mkdir()
    config = dataclasses.replace(QUICK, real_traces="mine")
    assert real_traces_dir(config) == Path("mine")
    with pytest.raises(FileNotFoundError, match="mine lacks digits_mlp.npz"):
        load_real_traces(config)


def test_report_without_real_traces(tmp_path):
    config = dataclasses.replace(QUICK, steps=200, real_traces=None)
    result = build_report(tmp_path, config)
    text = (tmp_path / "README.md").read_text()
    assert "## Real models" not in text and not (tmp_path / "layers_flush.png").exists()
    assert "left out of this report" in text
    assert result["data"].real == []


def test_every_table_of_the_report_renders_with_all_its_cells(quick_report):
    """Issue 31: a markdown parser reads every table row with the header's cell count (the
    goal row "mean |predicted - measured|" lost its verdict before); numbers right-aligned;
    the configuration is JSON."""
    text = (quick_report / "README.md").read_text()
    assert assert_tables_render(text) >= 10
    goals = next(t for t in parsed_tables(text) if t[0] == ["goal", "result", "goal met"])
    row = next(r for r in goals if "mean |predicted - measured|" in r[0])
    assert row[1].startswith("mean |error| ") and row[2] in ("met", "missed")
    assert "|---|---|---:|---:|" in text  # the comparison table: names left, numbers right
    config = json.loads(text.split("Configuration (JSON): `")[1].split("`")[0])
    assert config == dataclasses.asdict(QUICK)
    assert "e-0" not in text  # percents never in exponent form (<0.001% below 0.001%)


@pytest.mark.slow
def test_rerunning_the_report_command_writes_the_same_bytes(quick_report, tmp_path):
    # issue 30: the commit line changed with every commit; now the same code gives the same bytes
    argv = [sys.executable, "-m", "sim", "report", "--quick", "--out", str(tmp_path), "-q"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in quick_report.iterdir())
    assert names == sorted(p.name for p in tmp_path.iterdir())
    for name in names:
        assert (tmp_path / name).read_bytes() == (quick_report / name).read_bytes(), name
    lines = (tmp_path / "README.md").read_text().splitlines()
    assert lines[2].startswith("> **Smoke run** (`dls report --quick` sizes: 600 steps")
