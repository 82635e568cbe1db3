"""``dls sweep`` and ``dls report``'s tables print a flushed share as ``dls simulate`` does
(issue 49, A): bounds where the replay went beyond the scales the trace measured flushing at,
``not measured`` and ``>=`` where it measured none, never a bare figure; on traces made here."""

import csv
import dataclasses
import re

import numpy as np

from sim.cli.main import main
from sim.replay.run import simulate
from sim.replay.selection import per_setting
from sim.replay.sweep import grid_points, run_sweep
from sim.report.text import results_table
from sim.report.text_defaults import sweep_table
from updater.policy import DynamicScale, NnablaLegacy
from updater.policy.presets import make_policy
from updater.trace import Trace

STEPS = 6


def _old(name="old") -> Trace:
    """As an older recorder under nnabla-legacy (scale 8) wrote it: flushing measured at 8 and
    2**-4, 2**-8, 2**-12 times it only, 18.75% flushed at 8."""
    t = Trace.from_steps([[2.0**-20, 2.0**-10, 1.0]] * STEPS, name=name)
    scales = np.tile(8.0 * 2.0 ** np.array([-12, -8, -4, 0]), (STEPS, 1))
    shares = np.tile([0.5, 0.375, 0.25, 0.1875], (STEPS, 1))
    return dataclasses.replace(t, flush_scales=scales, flush_shares=shares)


def _bare(name="bare") -> Trace:
    """As a recording without Probes(flush=True): no flush measurement."""
    return Trace.from_steps([[2.0**-20, 2.0**-10, 1.0]] * STEPS, name=name)


def _cells(out: str, first: str) -> list:
    line = next(x for x in out.splitlines() if x.strip().startswith(first))
    return re.split(r"\s{2,}", line.strip())


def test_sweep_prints_bounds_and_not_measured_and_writes_them_to_csv(tmp_path, capsys):
    old, bare = (str(t.save(tmp_path / f"{t.name}.npz")) for t in (_old(), _bare()))
    out_csv = tmp_path / "s.csv"
    argv = ["sweep", "--grid", "init_scale=8,2**15", "--families", "", "--trace", old]
    argv += ["--trace", bare, "--runs", "2", "--jitter", "0", "-q", "--csv", str(out_csv)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert _cells(out, "2^3  old")[5:7] == ["18.8%", "18.8%"]  # measured at 8: a figure
    assert _cells(out, "2^15  old")[5:7] == ["0%-18.8%", "0%-18.8%"]
    assert _cells(out, "2^15  bare")[5:7] == ["not measured", ">=0%"]
    words = " ".join(out.split())
    assert "note: old: for 1 of 2 rows the policy's scale lay outside the scales old" in words
    assert "measured flushing at (2^-9 to 2^3) on some applied steps: 1 print their" in words
    assert "note: bare: flushing not measured (a recording without Probes(flush=True))" in words
    rows = {(r["init_scale"], r["trace"]): r for r in csv.DictReader(out_csv.open())}
    assert rows[("32768.0", "old")]["flushing"] == "bounded"
    assert float(rows[("32768.0", "old")]["signal lost, high (%)"]) == 18.75
    assert rows[("8.0", "old")]["flushing"] == "measured"
    assert rows[("32768.0", "bare")]["flushing"] == "not measured"
    assert float(rows[("32768.0", "bare")]["signal lost, high (%)"]) == 100.0


def test_the_reports_results_table_prints_bounds_and_says_why():
    rows = [
        simulate(policy, trace, runs=2, jitter=0.0).summary()
        for trace in (_old(), _bare())
        for policy in (NnablaLegacy(), DynamicScale())
    ]
    for r, label in zip(rows, ["nnabla-legacy", "dynamic"] * 2):
        r["label"] = label
    text = results_table(rows)
    lines = [x for x in text.splitlines() if x.startswith("| ")]
    cells = {(r[1], r[2]): r[5:7] for r in (re.split(r"\s*\|\s*", x) for x in lines)}
    assert cells[("old", "nnabla-legacy")] == ["18.8%", "18.8%"]
    assert cells[("old", "dynamic")] == ["0%-18.8%", "0%-18.8%"]
    assert cells[("bare", "dynamic")] == ["not measured", ">=0%"]
    words = " ".join(text.split())
    assert "old: for 1 of 2 rows the policy's scale lay outside the scales old measured" in words
    assert "bare: flushing not measured" in words


def test_the_reports_sweep_table_prints_each_familys_bounds():
    points = grid_points({"init_scale": (8.0, 2.0**15)})
    policies = [make_policy("dynamic", **p) for p in points]
    rows = run_sweep(policies, points, [_old(), _bare()], runs=2, seed=0, jitter=0.0)
    folded = per_setting(rows, ["init_scale"])
    text = sweep_table(folded, ["init_scale"], ["old", "bare"])
    cells = {r[1]: r[2:6] for r in (re.split(r"\s*\|\s*", x) for x in text.splitlines()[2:])}
    # per family, then the mean and the worst: bare measured nothing, so both are only ">="
    assert cells["2^3"] == ["18.8%", ">=0%", ">=9.38%", ">=18.8%"]
    assert cells["2^15"] == ["0%-18.8%", ">=0%", ">=0%", ">=0%"]
