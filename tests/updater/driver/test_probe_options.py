"""The updater's option ``probes`` (issue 38 item 3): the probe instructions are a record of the
driver's (``updater.Probes``), no longer ``GradientRecorder``'s arguments; the old spelling warns
and records the same trace for one release."""

import warnings

import numpy as np
import pytest

from tests.updater.driver.test_probes import _sum_model
from tests.updater.trace.test_trace_files_load_alike import fingerprint
from updater import DynamicLossScalingUpdater, DynamicScale, GradientRecorder, Probes, Trace
from updater.driver.recording.flush_schedule import flush_schedule

pytestmark = pytest.mark.nnabla

OLD = dict(probe_overflow=True, measure_flush=True, flush_every=2, forward_headroom=True)
NEW = Probes(overflow=True, flush=True, flush_every=2, forward_headroom=True)


def test_each_field_is_checked_naming_it_the_value_and_the_range():
    for field, bad, error in [
        ("overflow", 1, TypeError),
        ("flush", "yes", TypeError),
        ("from_previous", None, TypeError),
        ("forward_headroom", 0.0, TypeError),
        ("flush_every", 0, ValueError),
        ("flush_every", 1.5, ValueError),
        ("flush_every", "2", TypeError),
        ("pass_budget", 0.0, ValueError),
        ("pass_budget", float("inf"), ValueError),
        ("pass_budget", "2", TypeError),
    ]:
        with pytest.raises(error, match=rf"^{field} must be .*, got {bad!r}"):
            Probes(**{field: bad})
    with pytest.raises(ValueError, match=r"flush_every must be an int >= 1 or None, got 0"):
        Probes(flush_every=0)
    with pytest.raises(ValueError, match=r"pass_budget must be a finite number > 0, got -1"):
        Probes(pass_budget=-1)
    whole = Probes(flush=True, flush_every=4.0, pass_budget=1)  # whole floats, ints
    assert whole.flush_every == 4 and isinstance(whole.flush_every, int)
    assert whole.pass_budget == 1.0 and isinstance(whole.pass_budget, float)
    assert Probes() == Probes(False, False, None, True, False, 2.0) and not Probes().reruns
    every = flush_schedule(Probes(flush=True, flush_every=3), rounds=1)
    assert [every.due(k, 0) for k in range(4)] == [True, False, False, True]
    assert flush_schedule(Probes(overflow=True), rounds=1) is None


def test_probes_need_a_recorder_and_a_probes_record(tmp_path):
    solver, loss = _sum_model("probes_alone", [0.25, 0.5])
    with pytest.raises(ValueError, match=r"probes=Probes\(overflow=True.* without a recorder"):
        DynamicLossScalingUpdater(solver, loss, None, probes=Probes(overflow=True))
    recorder = GradientRecorder(tmp_path / "t.npz")
    with pytest.raises(TypeError, match=r"probes must be an instance of .*Probes, got dict"):
        DynamicLossScalingUpdater(solver, loss, None, recorder=recorder, probes={"overflow": 1})
    upd = DynamicLossScalingUpdater(solver, loss, None, recorder=recorder, probes=Probes())
    assert upd.probes == Probes() and upd.update().update_applied  # the legitimate call
    recorder.close()


def _recorded(tmp_path, name, recorder_args, probes):
    solver, loss = _sum_model(f"spelling_{name}", [4.0, -1.0, 0.5, 2.0**-24, 0.0])
    recorder = GradientRecorder(tmp_path / f"{name}.npz", name="spelling", **recorder_args)
    policy = DynamicScale(init_scale=2.0**12, growth_interval=1, hysteresis=1)
    upd = DynamicLossScalingUpdater(
        solver, loss, None, policy=policy, recorder=recorder, probes=probes
    )
    records = [(r.scale, r.update_applied) for r in (upd.update() for _ in range(6))]
    return Trace.load(recorder.close()), records, recorder.probe_passes


def test_the_old_spelling_warns_and_records_the_same_trace_as_the_new_one(tmp_path):
    """On a real cpu:half graph that overflows from 2**14 and flushes 2**-24 below 2**0:
    thresholds, finite scales, flushing (every 2nd recorded step), forward peaks, the trace's
    ``overflow_probed`` and the passes are the same, field by field."""
    with pytest.warns(DeprecationWarning, match=r"recorder=rec, probes=Probes\(overflow=True\)"):
        old = _recorded(tmp_path, "old", OLD, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the new spelling does not warn
        new = _recorded(tmp_path, "new", {}, NEW)
    (old_trace, old_records, old_passes), (new_trace, new_records, new_passes) = old, new
    assert old_records == new_records and old_passes == new_passes > 0
    assert new_trace.overflow_probed and np.isfinite(new_trace.overflow_scale).any()
    assert new_trace.has_flush and new_trace.has_forward
    measured = ~np.isnan(new_trace.flush_shares).all(axis=1)
    assert measured.tolist() == [True, False] * 3  # flush_every=2
    assert fingerprint(old_trace) == fingerprint(new_trace)


def test_both_spellings_at_once_are_refused(tmp_path):
    solver, loss = _sum_model("spelling_both", [1.0, 2.0])
    with pytest.warns(DeprecationWarning):
        recorder = GradientRecorder(tmp_path / "t.npz", probe_overflow=True)
    with pytest.raises(ValueError, match=r"given to the updater and probe options given to its"):
        DynamicLossScalingUpdater(solver, loss, None, recorder=recorder, probes=Probes())
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="probe_overflow"):
        GradientRecorder(tmp_path / "u.npz", probe_overflow="yes")  # still checked


def test_a_trace_is_probed_only_when_every_step_was(tmp_path):
    """Each recorded step says whether it was probed (the updater leaves the recorder as made);
    a recorder moved to an updater without overflow probes marks the trace unprobed (steps of
    both kinds), and a recorder of its own is not probed."""
    solver, loss = _sum_model("probed_steps", [4.0, -1.0])
    recorder = GradientRecorder(tmp_path / "t.npz")
    assert not recorder.overflow_probed
    probed = DynamicLossScalingUpdater(
        solver, loss, None, recorder=recorder, probes=Probes(overflow=True)
    )
    assert not recorder.overflow_probed  # no step recorded yet
    probed.update()
    assert recorder.overflow_probed and recorder.trace().overflow_probed
    plain = DynamicLossScalingUpdater(solver, loss, None, recorder=recorder)
    plain.update()
    assert not recorder.overflow_probed and not Trace.load(recorder.close()).overflow_probed


def test_assigned_probes_take_effect_at_the_next_update(tmp_path):
    solver, loss = _sum_model("probes_assigned", [4.0, -1.0])
    recorder = GradientRecorder(tmp_path / "t.npz")
    upd = DynamicLossScalingUpdater(solver, loss, None, recorder=recorder)
    upd.update()
    assert recorder.probe_passes == 0
    upd.probes = Probes(overflow=True)
    upd.update()
    assert recorder.probe_passes > 0 and recorder.overflow_probed
    with pytest.raises(TypeError, match="probes must be an instance"):
        upd.probes = True
    assert upd.probes == Probes(overflow=True)
    recorder.close()
