"""The forward pass's headroom in traces, ``dls simulate/tune`` and the report (issue 32,
item 3): a model that came within a factor 4 of float16's range is warned about, naming the
function and the step and pointing to updater.amp.rewrite."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.replay.headroom import forward_headroom_line, forward_headroom_warning
from updater.trace import NBINS, Trace
from updater.trace.parts import concat_traces

DLS = Path(sys.executable).parent / "dls"


def _trace(peaks, name="bn_model") -> Trace:
    steps = len(peaks)
    counts = np.zeros((steps, NBINS), np.int64)
    counts[:, 60] = 5
    where = tuple(f"Affine#{t}" for t in range(steps))
    where = where[:-1] + ("BatchNormalization#2 (batch variance)",)
    return Trace(
        counts,
        np.zeros(steps),
        np.full(steps, 1e-3),
        np.zeros(steps, bool),
        name,
        forward_peak=peaks,
        forward_where=where,
    )


def test_the_warning_names_the_function_the_step_and_the_fix():
    near = _trace([0.01, 0.02, np.nan, 0.3])
    text = forward_headroom_warning(near)
    assert "BatchNormalization#2 (batch variance) at recorded step 3" in text
    assert "0.3 x 65504" in text and "updater.amp.rewrite" in text and "factor 4" in text
    assert forward_headroom_warning(_trace([0.01, 0.2, 0.1])) is None  # a factor 5 away
    assert forward_headroom_warning(near, factor=2) is None
    assert "inf, in" in forward_headroom_warning(_trace([0.1, np.inf]))
    assert "not measured" in forward_headroom_line(Trace.from_steps([np.ones(3)], "plain"))
    assert "stayed more than a factor 4 inside" in forward_headroom_line(_trace([0.01, 0.2]))


def test_forward_headroom_round_trips_and_concatenates(tmp_path):
    t = _trace([0.01, 0.3])
    back = Trace.load(t.save(tmp_path / "t.npz"))
    np.testing.assert_array_equal(back.forward_peak, t.forward_peak)
    assert back.forward_where == t.forward_where
    both = concat_traces([t, Trace.from_steps([np.ones(3)], "plain")], "both")
    assert both.forward_where[-1] == "" and np.isnan(both.forward_peak[-1])
    with pytest.raises(ValueError, match="forward_peak and forward_where must be given together"):
        Trace(t.counts, t.zeros, t.absmax, t.nonfinite, forward_peak=[0.1, 0.2])
    with pytest.raises(ValueError, match="must both have 2 entries"):
        Trace(t.counts, t.zeros, t.absmax, t.nonfinite, forward_peak=[0.1], forward_where=["a"])
    with pytest.raises(ValueError, match="forward_peak must hold numbers >= 0"):
        Trace(
            t.counts, t.zeros, t.absmax, t.nonfinite, forward_peak=[-1, 0], forward_where=["a", "b"]
        )


@pytest.mark.parametrize("command", ["simulate", "tune"])
def test_dls_warns_on_a_trace_near_the_edge_and_not_on_one_far_from_it(tmp_path, command):
    near = _trace([0.01] * 9 + [0.3]).save(tmp_path / "near.npz")
    far = _trace([0.01] * 10, "far_model").save(tmp_path / "far.npz")
    for path, warned in ((near, True), (far, False)):
        argv = [str(DLS), command, "--trace", str(path)]
        argv += ["--runs", "2"] if command == "simulate" else []
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert ("warning: bn_model: the float16 forward pass came within" in done.stderr) is warned
        assert ("updater.amp.rewrite" in done.stderr) is warned


def test_a_recording_without_batch_normalizations_sums_says_so():
    """Issue 39: traces recorded before the accumulators were measured hold BatchNormalization's
    batch variance, a factor N below its float16 sum of x^2; their line says it is no measure of
    BatchNormalization's headroom. A trace with the sum, or without BatchNormalization, does not."""
    old = forward_headroom_line(_trace([0.01, 0.02]))
    assert "sum of x^2 was not measured" in old
    new = _trace([0.01, 0.02])
    new.forward_where = ("Affine#0", "BatchNormalization#2 (sum of x^2)")
    assert "not measured" not in forward_headroom_line(new)
    plain = _trace([0.01, 0.02])
    plain.forward_where = ("Affine#0", "Affine#1")
    assert "not measured" not in forward_headroom_line(plain)
