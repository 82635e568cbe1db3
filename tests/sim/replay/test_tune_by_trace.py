"""``tune`` on several traces shows what its pooled rows average: each trace's signal lost and
skipped steps under the chosen and the default settings (issue 41)."""

import numpy as np

from sim.replay.tune import tune
from sim.traces.families import make_trace


def test_the_per_trace_rows_average_to_the_pooled_ones():
    traces = {
        "a": make_trace("spikes", steps=300, seed=1),
        "b": make_trace("drifting", steps=300, seed=2),
    }
    found = tune(traces, runs=4)
    rows = found["by_trace"]
    assert [(r["trace"], r["which"]) for r in rows] == [
        ("spikes", "chosen"),
        ("spikes", "default"),
        ("drifting", "chosen"),
        ("drifting", "default"),
    ]
    for which in ("chosen", "default"):
        mine = [r for r in rows if r["which"] == which]
        assert np.isclose(np.mean([r["signal_lost"] for r in mine]), found[which]["lost_mean"])
        assert np.isclose(np.mean([r["skipped"] for r in mine]), found[which]["skipped_mean"])
        assert max(r["signal_lost"] for r in mine) == found[which]["lost_worst"]
