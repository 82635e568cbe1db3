"""The goals the simulator's predictions are held to (sim.replay.predictions.prediction_goals),
on constructed rows."""

from sim.replay.predictions import prediction_goals


def _row(metric, predicted, measured, low=None, high=None, model="m", policy="p"):
    steps = dict(skipped_both=[3], skipped_measured_only=[7], skipped_predicted_only=[])
    return {
        **steps,
        "model": model,
        "policy": policy,
        "metric": metric,
        "predicted": predicted,
        "measured": measured,
        "low": predicted if low is None else low,
        "high": predicted if high is None else high,
        "error": predicted - measured,
    }


def test_skipped_must_be_inside_the_spread_everywhere():
    rows = [_row("skipped", 4, 5, 3, 6), _row("skipped", 4, 11, 3, 4, model="bn")]
    (goal,) = prediction_goals(rows)
    assert not goal["met"] and goal["result"] == "inside in 1 of 2"
    assert goal["misses"] == [
        {
            "model": "bn",
            "policy": "p",
            "by": "measured 11, spread 3-4 (outside by 7); skipped at the same steps in both: "
            "[3], in the real run only: [7], in the replay only: []",
        }
    ]
    assert prediction_goals(rows[:1])[0]["met"]


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
