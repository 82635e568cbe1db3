"""The calibration of the commands' predictive interval (issue 49, part 2): the stored factors
are the ones its report recomputed, and the cases are what the calibration says they are."""

import re

import numpy as np

from sim.replay.calibration import CALIBRATION_POLICIES, calibration_cases
from sim.replay.measured import CHECKED_POLICIES
from sim.replay.spread import CALIBRATED
from tests.paths import ROOT
from updater.trace import Trace


def test_the_stored_factors_are_the_ones_the_report_recomputed():
    text = (ROOT / "reports" / "interval.md").read_text()
    for metric, (factor, level) in CALIBRATED.items():
        row = re.search(rf"^\| {metric} \| (\d+) \| ([\d.]+) \| (\d+)% \| (\w+) \|$", text, re.M)
        assert row is not None, metric
        assert float(row.group(2)) == factor and int(row.group(3)) / 100 == level
        assert row.group(4) == "yes"


def test_the_calibration_leaves_the_held_out_policies_out():
    held_out = [repr(p) for p in CHECKED_POLICIES.values()]
    assert not any(repr(p) in held_out for p in CALIBRATION_POLICIES.values())


def _recording(seed: int, steps: int = 120) -> Trace:
    rng = np.random.default_rng(seed)
    trace = Trace.from_steps([rng.uniform(2.0**-12, 2.0**-4, 10) for _ in range(steps)], "m")
    over = np.where(
        rng.random(steps) < 0.1, 2.0**15, np.where(rng.random(steps) < 0.1, 2.0**14, np.inf)
    )
    trace.overflow_scale = over
    return trace


def test_each_recording_predicts_the_others_replay_and_flat_cases_are_left_out():
    a, b = _recording(1), _recording(2)
    cases = calibration_cases({"m": [a, b]})
    skipped = cases["skipped"]
    by_policy = {}
    for c in skipped:
        by_policy.setdefault(c["policy"], []).append((c["value"], c["target"]))
    for pairs in by_policy.values():  # both directions: a predicts b, b predicts a
        assert len(pairs) == 2 and pairs[0] == pairs[1][::-1]
    static14 = by_policy["StaticScale(2**14)"][0]  # every step overflowing at 2**14 or 2**15
    assert static14 == (
        float(np.sum(a.overflow_scale <= 2**14)),
        float(np.sum(b.overflow_scale <= 2**14)),
    )
    for c in skipped:
        assert c["drawn"].shape == (16,) and c["unit"] == 1.0
    # a model that never overflows gives nothing to calibrate on
    flat = Trace.from_steps([np.full(4, 2.0**-8)] * 40, "f")
    assert calibration_cases({"f": [flat, flat]})["skipped"] == []
