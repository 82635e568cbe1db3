"""The trace's groups of fields as sub-records (issue 38 item 4): each group checked when set,
replaced, concatenated, selected by steps and read whole; the recorder's named rows."""

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from tests.broken_files import with_bomb
from tests.paths import ROOT
from tests.updater.common.test_limits import LOAD
from updater.trace import Trace
from updater.trace.flush import FlushCurve
from updater.trace.format import GROUPS
from updater.trace.parts import concat_traces, load_parts, write_part
from updater.trace.recorder import GradientRecorder
from updater.trace.rows import KeptStep, RecordedStep, step_row


def _trace(steps=3):
    return Trace.from_steps([np.array([1.0, 2.0**-20, 0.0])] * steps, name="g")


def _forward(steps=3):
    t = _trace(steps)
    peaks = np.linspace(0.01, 0.03, steps)
    return dataclasses.replace(t, forward_peak=peaks, forward_where=("Affine#0",) * steps)


def test_each_public_field_reads_through_its_group():
    t = _forward()
    assert t.forward_peak is t.forward.forward_peak and t.has_forward
    assert t.overflow_scale is t.thresholds.overflow_scale
    assert t.flush_scales is None and t.layer_names is None and not t.has_flush
    assert sorted(f for g in GROUPS for f in g.names()) == sorted(
        "overflow_scale finite_scale overflow_probed layer_names layer_counts layer_zeros "
        "layer_absmax flush_scales flush_shares forward_peak forward_where".split()
    )


def test_setting_a_field_checks_its_group_again():
    t = _forward()
    t.forward_where = ("Affine#1",) * 3  # a good value is taken
    assert t.forward.forward_where == ("Affine#1",) * 3
    with pytest.raises(ValueError, match="forward_peak must hold numbers >= 0"):
        t.forward_peak = [0.1, -1.0, 0.1]
    assert t.forward_peak[1] > 0  # the group is unchanged
    with pytest.raises(ValueError, match="flush_scales and flush_shares must be given together"):
        t.flush_scales = np.ones((3, 2))
    with pytest.raises(ValueError, match="finite_scale must hold numbers >= 0 .* at step 0"):
        t.finite_scale = [np.inf, 0.0, 0.0]


def test_replace_changes_one_field_of_a_group_or_drops_it():
    t = _forward()
    moved = dataclasses.replace(t, forward_where=("Conv#0",) * 3)
    assert moved.forward_where == ("Conv#0",) * 3
    np.testing.assert_array_equal(moved.forward_peak, t.forward_peak)
    assert dataclasses.replace(t, forward=None).forward_peak is None
    every = dataclasses.replace(t, every=4)
    assert every.every == 4 and every.has_forward
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['flush_curve'\\]"):
        Trace(t.counts, t.zeros, t.absmax, t.nonfinite, flush_curve=None)


def test_take_selects_the_steps_of_every_group():
    t = dataclasses.replace(
        _forward(),
        overflow_scale=[np.inf, 8.0, 4.0],
        finite_scale=[2.0, 4.0, 0.0],
        overflow_probed=True,
        flush_scales=np.ones((3, 2)),
        flush_shares=[[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]],
    )
    picked = t.take([2, 2, 0])
    assert picked.overflow_scale.tolist() == [4.0, 4.0, np.inf] and picked.overflow_probed
    assert picked.finite_scale.tolist() == [0.0, 0.0, 2.0]
    assert picked.flush_shares[:, 0].tolist() == [0.5, 0.5, 0.1]
    assert picked.forward_peak.tolist() == [0.03, 0.03, 0.01]
    assert t.thresholds.censored.tolist() == [True, False, False]
    assert t.thresholds.known.tolist() == [True, True, True]


def test_concatenation_fills_a_group_a_part_lacks_as_not_measured():
    joined = concat_traces([_forward(2), _trace(1)], "j")
    assert joined.forward_where == ("Affine#0", "Affine#0", "")
    assert np.isnan(joined.forward_peak[2]) and joined.forward_peak[0] == 0.01
    assert concat_traces([_trace(1), _trace(2)], "j").forward is None


def test_parts_with_flush_curves_of_two_widths_are_named(tmp_path):
    path = tmp_path / "t.npz"
    for i, width in enumerate((2, 2, 3)):
        curve = FlushCurve(np.ones((1, width)), np.zeros((1, width)))
        write_part(path, i, dataclasses.replace(_trace(1), flush=curve))
    with pytest.raises(ValueError, match=r"part-00000002.npz: flush curves of another width"):
        load_parts(path)


def test_a_per_step_array_declaring_more_dimensions_is_refused_before_inflating(tmp_path):
    """The archive's declared shapes are each group's (``SHAPES``), whole: a forward peak of
    (steps, 2**22) float64 (128 MiB) is not read."""
    path = _forward(5).save(tmp_path / "t.npz")
    with_bomb(path, "forward_peak", (5, 2**22), np.float64)
    proc = subprocess.run(
        [sys.executable, "-c", LOAD.format(root=str(ROOT), path=str(path))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    error, grown_mib = proc.stdout.splitlines()
    assert "forward_peak must have shape (5,), got (5, 4194304)" in error, proc.stderr
    assert int(grown_mib) < 64


def test_the_recorder_keeps_each_step_and_makes_its_named_row_when_written(tmp_path):
    rec = GradientRecorder(tmp_path / "t.npz")
    rec.record(0, [np.array([1.0, np.inf], np.float16)], 8.0, finite_scale=4.0)
    (kept,) = rec._kept
    assert isinstance(kept, KeptStep) and kept.step.grads == [] and kept.parts == {}
    row = step_row(kept, None)
    assert isinstance(row, RecordedStep)
    thresholds = row.parts["thresholds"]
    assert (thresholds["overflow_scale"], thresholds["finite_scale"], row.nonfinite) == (
        8.0,
        4.0,
        False,
    )
    assert row.parts["layers"] is None and row.parts["flush"] is None
    assert row.parts["forward"] is None
    with pytest.raises(ValueError, match="finite_scale must be below the step's overflow"):
        rec.record(1, [np.array([np.inf], np.float16)], 8.0, finite_scale=8.0)
    with pytest.raises(ValueError, match="forward_peak must be a number >= 0"):
        rec.record(1, [np.array([1.0], np.float16)], 8.0, forward_peak=(-1.0, "Affine#0"))
    assert len(rec._kept) == 1
    rec.close()
