"""The real runs held out for the predictive interval's check (issue 49): made like the checked
runs, shipped beside them, read by bench_interval's check and by nothing that calibrates."""

from __future__ import annotations

import re

import pytest

from sim.nnabla_studies.held_out import held_out_tasks, main
from sim.nnabla_studies.real_traces import DEFAULT_STEPS
from sim.replay.calibration import held_out_rows
from sim.replay.measured import CHECKED_POLICIES, MeasuredRun, run_path
from sim.traces.real import (
    CHECK_ORDERS,
    HELD_OUT_ORDERS,
    HELD_OUT_POLICIES,
    RECORDINGS,
    trace_path,
)
from tests.paths import SHIPPED_TRACES
from updater.trace import Trace


def test_the_held_out_runs_ship_in_batch_orders_nothing_else_used():
    assert set(HELD_OUT_POLICIES) <= set(CHECKED_POLICIES)
    for model, orders in HELD_OUT_ORDERS.items():
        assert not set(orders) & {*RECORDINGS, *CHECK_ORDERS}
        for label in HELD_OUT_POLICIES:
            for order in orders:
                run = MeasuredRun.load(run_path(SHIPPED_TRACES, model, label, order))
                assert (run.model, run.label, run.order) == (model, label, order)
                assert run.steps == DEFAULT_STEPS[model] and run.stick == "probed"
                assert repr(run.policy) == repr(CHECKED_POLICIES[label])
    text = (SHIPPED_TRACES / "held_out.md").read_text()
    runs = sum(len(orders) for orders in HELD_OUT_ORDERS.values())
    assert text.count(" | dynamic-fast | ") == text.count(" | headroom | ") == runs


def test_the_check_reads_every_held_out_run_and_the_spread_counts_them_all():
    recordings = {
        "sequence_lstm": [
            Trace.load(trace_path(SHIPPED_TRACES, "sequence_lstm", k)) for k in RECORDINGS
        ]
    }
    rows = held_out_rows(recordings, SHIPPED_TRACES)
    both = [r for r in rows if r["from"] == "all" and r["metric"] == "skipped"]
    orders = {
        label: [r["order"] for r in both if r["policy"] == label] for label in CHECKED_POLICIES
    }
    assert orders["nnabla-legacy"] == list(CHECK_ORDERS)
    assert (
        orders["headroom"]
        == orders["dynamic-fast"]
        == [
            *CHECK_ORDERS,
            *HELD_OUT_ORDERS["sequence_lstm"],
        ]
    )
    headroom = [r for r in both if r["policy"] == "headroom"]
    counts = [
        MeasuredRun.load(
            run_path(SHIPPED_TRACES, "sequence_lstm", "headroom", r["order"])
        ).metrics()["skipped"]
        for r in headroom
    ]
    assert [r["measured"] for r in headroom] == counts
    assert {r["runs_spread"] for r in headroom} == {max(counts) - min(counts)}
    assert all(r["orders_spread"] >= r["runs_spread"] for r in headroom)
    fewer = held_out_rows(recordings, SHIPPED_TRACES, more_orders={})
    assert {r["order"] for r in fewer} == set(CHECK_ORDERS)


@pytest.mark.nnabla
def test_the_command_trains_the_held_out_runs_as_checked_runs(tmp_path):
    pytest.importorskip("nnabla")
    pytest.importorskip("sklearn")
    threes = {m: (3,) for m in HELD_OUT_ORDERS}
    assert held_out_tasks(threes, steps=2) == [
        (m, 2, 3, label) for m in HELD_OUT_ORDERS for label in HELD_OUT_POLICIES
    ]
    assert main(["--out", str(tmp_path), "--orders", "3", "--steps", "2"]) == 0
    for model, _, order, label in held_out_tasks(threes, steps=2):
        run = MeasuredRun.load(run_path(tmp_path, model, label, order))
        assert run.steps == 2 and run.stick == "probed" and run.order == 3
    text = (tmp_path / "held_out.md").read_text()
    assert "python -m sim.nnabla_studies.held_out --out" in text
    assert len(re.findall(r"^\| \w+ \| [\w-]+ \| 3 \| 2 \|", text, re.M)) == 4
