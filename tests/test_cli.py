"""The ``dls`` command line (sim/cli.py) and the report it writes (sim/report.py)."""

import csv
import re

import matplotlib.image as mpimg
import numpy as np
import pytest

from sim.cli import main
from sim.fp16 import classify
from sim.report import QUICK, build_report, choose
from sim.run import PRESETS, simulate
from sim.traces import SSD_ZERO_SHARE, make_trace, sample_values, ssd_binade_shares


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    assert main(["report", "--out", str(out), "--quick"]) == 0
    return out


def _percent_cells(line):
    return [float(x) / 100 for x in re.findall(r"([0-9.eE+-]+)%", line)]


def test_simulate_prints_metrics_and_writes_a_plot(tmp_path, capsys):
    plot = tmp_path / "traj.png"
    code = main([
        "simulate", "--policy", "dynamic", "--set", "growth_interval=50", "--set",
        "init_scale=2**12", "--trace", "spikes", "--steps", "300", "--runs", "3",
        "--plot", str(plot),
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "'growth_interval': 50" in out and "'init_scale': 4096.0" in out
    assert "| dynamic | spikes | 3 |" in out
    assert mpimg.imread(plot).shape[:2] == (450, 800)


def test_simulate_takes_a_bool_setting(capsys):
    argv = ["simulate", "--set", "hysteresis=2", "--set", "consecutive_hysteresis=True"]
    assert main([*argv, "--steps", "50", "--runs", "1"]) == 0
    assert "'consecutive_hysteresis': True" in capsys.readouterr().out


def test_simulate_replays_a_recorded_trace_file(tmp_path, capsys):
    path = make_trace("nan", steps=200, seed=1, nan_prob=0.05).save(tmp_path / "rec.npz")
    assert main(["simulate", "--policy", "headroom", "--trace", str(path), "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "trace: nan (200 steps)" in out


def test_sweep_prints_and_writes_csv(tmp_path, capsys):
    out_csv = tmp_path / "sweep.csv"
    code = main([
        "sweep", "--policy", "dynamic", "--grid", "growth_interval=20,200", "--grid",
        "hysteresis=1,2", "--families", "stationary,nan", "--steps", "300", "--runs", "2",
        "--csv", str(out_csv),
    ])  # fmt: skip
    assert code == 0
    rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == 2 * 2 * 2
    assert {(r["growth_interval"], r["hysteresis"], r["trace"]) for r in rows} == {
        (g, h, f) for g in ("20", "200") for h in ("1", "2") for f in ("stationary", "nan")
    }
    # a short growth interval probes (and overflows) more often than a long one
    skipped = {(r["growth_interval"], r["trace"]): float(r["skipped"]) for r in rows}
    assert skipped[("20", "stationary")] > skipped[("200", "stationary")]
    assert "| growth_interval | hysteresis | trace |" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["simulate", "--trace", "missing_file.npz"], "trace file not found"),
        (["simulate", "--trace", "weird"], "--trace must be a family"),
        (["simulate", "--set", "growth_interval=0"], "growth_interval must be an int >= 1"),
        (["simulate", "--set", "growth_interval=1.5"], "needs an int"),
        (["simulate", "--set", "margin=2"], "unknown setting 'margin'"),
        (["simulate", "--set", "hysteresis"], "KEY=VALUE"),
        (["simulate", "--set", "consecutive_hysteresis=1"], "needs true or false"),
        (["simulate", "--policy", "magic"], "policy must be one of"),
        (["simulate", "--runs", "0"], "--runs"),
        (["simulate", "--jitter", "-1"], "--jitter"),
        (["sweep", "--families", "stationary"], "at least one --grid"),
        (["sweep", "--grid", "hysteresis=1", "--families", "moon"], "--families"),
        (["fly"], "invalid choice"),
        ([], "required"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_unreadable_trace_file_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros(2))
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--trace", str(bad)])
    assert exc.value.code == 2 and "not a gradient trace" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["simulate", "sweep", "report", "train"])
def test_help_has_description_and_examples(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert f"dls {command}" in text and "example" in text


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
    line = next(x for x in text.splitlines() if x.startswith("| 1 | "))
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


def test_report_is_deterministic(quick_report, tmp_path):
    again = build_report(tmp_path, QUICK, progress=False)
    for path in again["files"]:
        assert path.read_bytes() == (quick_report / path.name).read_bytes(), path.name


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


@pytest.mark.nnabla
def test_train_runs_the_demo(tmp_path, capsys):
    pytest.importorskip("nnabla")
    pytest.importorskip("updater.demo")
    assert main(["train", "--steps", "3", "--seed", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| variant |" in out and "float16 + this updater" in out
    assert list(tmp_path.glob("*.png"))
    written = (tmp_path / "train.md").read_text()
    assert "| float16 + this updater |" in written and "train_scale_trajectory.png" in written
