"""The goals the simulator's predictions are held to (sim.replay.predictions.prediction_goals),
on constructed rows."""

from sim.replay.predictions import prediction_goals


def _row(metric, predicted, measured, low=None, high=None, model="m", policy="p"):
    return {
        "model": model,
        "policy": policy,
        "order": 2,
        "metric": metric,
        "predicted": predicted,
        "measured": measured,
        "low": predicted if low is None else low,
        "high": predicted if high is None else high,
        "error": predicted - measured,
        "level": 0.9,
    }


def test_skipped_must_be_inside_the_90_percent_spread_in_90_percent_of_the_runs():
    rows = [_row("skipped", 4, 5, 3, 6), _row("skipped", 4, 11, 3, 4, model="bn")]
    (goal,) = prediction_goals(rows)
    assert not goal["met"] and goal["result"] == "inside in 1 of 2"
    assert goal["misses"] == [
        {
            "model": "bn",
            "policy": "p",
            "order": 2,
            "by": "measured 11, interval 3-4 (outside by 7)",
        }
    ]
    assert prediction_goals(rows[:1])[0]["met"]
    nine = rows[:1] * 8 + rows[1:]  # 8 of 9 inside: below 90%
    assert not prediction_goals(nine)[0]["met"]
    eleven = rows[:1] * 10 + rows[1:]
    assert prediction_goals(rows[:1] + eleven)[0]["met"]  # 11 of 12


def test_below_half_safe_is_held_to_a_mean_error_of_5_points():
    rows = [_row("below_half_safe", 0.10, 0.14), _row("below_half_safe", 0.5, 0.43)]
    (goal,) = prediction_goals(rows)
    assert not goal["met"] and goal["result"] == "mean |error| 5.5 points"  # (4 + 7) / 2
    assert [m["by"] for m in goal["misses"]] == ["error +7.0 points"]


def test_flushed_needs_25_percent_or_a_hundredth_of_a_point_in_three_quarters():
    rows = [
        _row("mean_flushed", 0.012, 0.01),  # 20% high: within
        _row("mean_flushed", 0.00005, 0.00014),  # 0.009 points: within
        _row("mean_flushed", 0.02, 0.01),  # 100% high: outside
        _row("mean_flushed", 0.011, 0.01),
    ]
    (goal,) = prediction_goals(rows)
    assert goal["met"] and goal["result"] == "within in 3 of 4"
    assert not prediction_goals(rows[1:3])[0]["met"]


def test_recordings_compared_counts_each_interval_and_the_pooled_one():
    from sim.replay.predictions import recordings_compared

    rows = [
        {**_row("skipped", 5, 9, 0, 12), "each": [3, 7], "alone": [(2, 4), (6, 9)]},
        {**_row("skipped", 1, 1, 0, 2), "each": [1, 1], "alone": [(0, 2), (0, 1)]},
    ]
    compared = recordings_compared(rows)
    assert [(c["spread"], c["level"], c["inside"], c["width"]) for c in compared] == [
        ("recording 0 alone", 0.9, 1, 2.0),  # 9 is outside 2-4
        ("recording 1 alone", 0.9, 2, 2.0),
        ("2 recordings", 0.9, 2, 7.0),
    ]
    assert {c["runs"] for c in compared} == {2} and {c["apart"] for c in compared} == {2.0}
    flushed = [{**_row("mean_flushed", 0.1, 0.1), "each": [0.1], "level": None, "alone": None}]
    assert recordings_compared(flushed, "mean_flushed") == []
