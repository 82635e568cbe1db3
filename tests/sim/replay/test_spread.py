"""The predictive spread (sim.replay.spread) and its measured coverage on the shipped recordings
and checked runs (sim.replay.predictions)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.replay.predictions import prediction_goals, prediction_rows, recordings_compared
from sim.replay.spread import LEVEL, interval_half_width, prediction_interval, t_quantile
from sim.report.experiments import QUICK, load_real_pools
from tests.paths import SHIPPED_TRACES


@pytest.mark.parametrize("df", [1, 2, 3, 5, 10, 30, 200])
@pytest.mark.parametrize("p", [0.9, 0.95, 0.995])
def test_t_quantile_matches_scipy(p, df):
    stats = pytest.importorskip("scipy.stats")
    assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-5)
    assert t_quantile(1 - p, df) == pytest.approx(-stats.t.ppf(p, df), rel=1e-5)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_the_interval_holds_a_new_normal_draw_at_its_level(n):
    rng = np.random.default_rng(0)
    draws = rng.normal(10.0, 3.0, size=(20_000, n + 1))
    held = [lo <= d[-1] <= hi for d in draws for lo, hi in [prediction_interval(d[:-1])]]
    assert np.mean(held) == pytest.approx(LEVEL, abs=0.01)


def test_one_value_has_no_interval_and_bad_input_is_refused():
    assert prediction_interval([3.0]) is None and prediction_interval([]) is None
    assert prediction_interval([4.0, 4.0]) == (4.0, 4.0)
    lo, hi = prediction_interval([10.0, 12.0])
    assert (lo + hi) / 2 == 11 and hi - lo == pytest.approx(2 * 6.3138 * 2**0.5 * 1.5**0.5, 1e-4)
    with pytest.raises(ValueError, match="n must be an int >= 2"):
        interval_half_width(1, 1.0)
    with pytest.raises(ValueError, match="level must be in"):
        prediction_interval([1.0, 2.0], level=90)
    with pytest.raises(ValueError, match="df must be an int >= 1, got 0"):
        t_quantile(0.9, 0)


def test_shipped_recordings_hold_the_checked_runs_in_their_90_percent_spread():
    """Issue 39: the 5-95% of the pooled jittered runs held 8 of 12 checked runs' skipped
    steps; the 90% predictive spread must hold at least 11 of 12."""
    rows = prediction_rows(load_real_pools(QUICK), SHIPPED_TRACES, QUICK.jitter, QUICK.seed)
    skipped = [r for r in rows if r["metric"] == "skipped"]
    assert len(skipped) == 12 and {r["level"] for r in skipped} == {LEVEL}
    inside = sum(r["low"] <= r["measured"] <= r["high"] for r in skipped)
    assert inside >= 11
    goal = next(g for g in prediction_goals(rows) if g["metric"] == "skipped")
    assert goal["met"] and goal["result"] == f"inside in {inside} of 12"
    compared = {c["spread"]: c for c in recordings_compared(rows)}
    assert compared["2 recordings, jittered runs pooled (their 5-95%)"]["inside"] == 8
    projected = [c["width"] for c in compared.values() if c["inside"] is None]
    assert projected == sorted(projected, reverse=True)  # more recordings, narrower


def test_a_prediction_from_one_recording_claims_no_level():
    pools = load_real_pools(QUICK)
    one = {"sequence_lstm": pools["sequence_lstm"].traces[0]}
    rows = prediction_rows(one, SHIPPED_TRACES, QUICK.jitter, QUICK.seed)
    assert {r["level"] for r in rows} == {None}
    goal = next(g for g in prediction_goals(rows) if g["metric"] == "skipped")
    assert not goal["met"] and "one recording" in goal["result"]
    assert [c["level"] for c in recordings_compared(rows)] == [None]
