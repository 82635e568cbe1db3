"""The report's predictions use the one calibrated interval (sim.replay.spread.calibrated_interval,
the one dls simulate and dls tune print; issue 49) and its measured coverage on the shipped
recordings and checked runs (sim.replay.predictions)."""

from __future__ import annotations

from sim.replay import spread
from sim.replay.intervals import replay_intervals
from sim.replay.measured import CHECKED_POLICIES
from sim.replay.predictions import prediction_goals, prediction_rows, recordings_compared
from sim.replay.spread import CALIBRATED
from sim.report.experiments import QUICK, load_real_pools
from tests.paths import SHIPPED_TRACES


def test_the_report_prints_the_interval_dls_simulate_prints():
    """Issue 49: prediction_rows gave the Student-t interval of the recordings' replays while
    dls simulate printed the calibrated one; the report's rows are now the commands' interval,
    from both recordings and from each alone, at its calibrated level."""
    pools = load_real_pools(QUICK)
    rows = prediction_rows(pools, SHIPPED_TRACES, QUICK.seed)
    for model, pool in pools.items():
        for label, policy in CHECKED_POLICIES.items():
            both = replay_intervals(policy, pool, seed=QUICK.seed)
            alone = [replay_intervals(policy, t, seed=QUICK.seed) for t in pool.traces]
            for metric, iv in both.items():
                (r,) = [
                    r
                    for r in rows
                    if (r["model"], r["policy"], r["metric"]) == (model, label, metric)
                ]
                assert (r["low"], r["high"], r["level"]) == (iv["low"], iv["high"], iv["level"])
                assert r["level"] == CALIBRATED[metric][1] and r["each"] == iv["each"]
                assert r["alone"] == [(a[metric]["low"], a[metric]["high"]) for a in alone]
    flushed = [r for r in rows if r["metric"] == "mean_flushed"]
    assert {(r["low"], r["high"], r["level"], r["alone"]) for r in flushed} == {(None,) * 4}
    assert not hasattr(spread, "prediction_interval")  # one interval rule


def test_shipped_recordings_hold_the_checked_runs_in_their_interval():
    rows = prediction_rows(load_real_pools(QUICK), SHIPPED_TRACES, QUICK.seed)
    skipped = [r for r in rows if r["metric"] == "skipped"]
    assert len(skipped) == 12 and {r["level"] for r in skipped} == {CALIBRATED["skipped"][1]}
    inside = sum(r["low"] <= r["measured"] <= r["high"] for r in skipped)
    assert inside >= 11
    goal = next(g for g in prediction_goals(rows) if g["metric"] == "skipped")
    assert goal["met"] and goal["result"] == f"inside in {inside} of 12"
    compared = recordings_compared(rows)
    assert [c["spread"] for c in compared] == [
        "recording 0 alone",
        "recording 1 alone",
        "2 recordings",
    ]
    assert {c["runs"] for c in compared} == {12} and all(c["inside"] >= 11 for c in compared)


def test_a_prediction_from_one_recording_claims_the_calibrated_level():
    """The factor was calibrated on one recording predicting another batch order, so one
    recording's interval holds its level too (the Student-t rule claimed none)."""
    pools = load_real_pools(QUICK)
    one = {"sequence_lstm": pools["sequence_lstm"].traces[0]}
    rows = prediction_rows(one, SHIPPED_TRACES, QUICK.seed)
    skipped = [r for r in rows if r["metric"] == "skipped"]
    assert {r["level"] for r in skipped} == {CALIBRATED["skipped"][1]}
    assert all(len(r["alone"]) == 1 and r["alone"][0] == (r["low"], r["high"]) for r in skipped)
    assert [c["spread"] for c in recordings_compared(rows)] == ["recording 0 alone"]
