"""The families table's safe scale (sim.report.experiments.family_rows) on probed real traces
(issue 39): below each step's probed overflow threshold and at most 2^15, the probes' ceiling."""

import numpy as np

from sim.report.experiments import family_rows
from sim.traces.families import make_trace
from sim.traces.real import trace_path
from tests.paths import SHIPPED_TRACES
from updater.policy import largest_safe_scale
from updater.trace import Trace


def test_a_probed_trace_s_safe_scale_uses_its_probes():
    conv = Trace.load(trace_path(SHIPPED_TRACES, "digits_conv_bn"))
    assert conv.overflow_probed and int((conv.overflow_scale <= 2.0**15).sum()) == 324
    (row,) = family_rows({"digits_conv_bn": conv})
    assert row["safe_first"] <= 2.0**15 and row["safe_last"] <= 2.0**15  # 2^19 from absmax alone
    # where the steps overflow at or below 2^15 the median follows the probes: the last 80 steps
    last = conv.overflow_scale[-80:]
    expected = np.median(np.minimum(np.where(np.isfinite(last), last / 2, 2.0**15), 2.0**15))
    assert row["safe_last"] == expected


def test_a_synthetic_trace_keeps_the_absmax_rule():
    t = make_trace("stationary", steps=100, seed=0)
    (row,) = family_rows({"stationary": t})
    assert row["safe_first"] == float(np.median(largest_safe_scale(t.absmax[:10])))
