"""A recorded step is one value (issue 51): the recorder takes a ``MeasuredStep``, each group of
the trace turns it into its part of the row and back (``trace_of`` loops over ``GROUPS``), and
the updater leaves the user's recorder as it was made."""

import dataclasses
from typing import ClassVar

import numpy as np
import pytest

from updater.trace import NBINS
from updater.trace import format as trace_format
from updater.trace import recorder as trace_recorder
from updater.trace import rows as trace_rows
from updater.trace.group import Group
from updater.trace.measured import MeasuredStep
from updater.trace.recorder import GradientRecorder


def _f16(*values):
    return np.array(values, np.float16)


def test_record_by_hand_is_the_measured_step_of_its_arguments(tmp_path):
    """Both entries give the same trace, every group included."""
    by_hand = GradientRecorder(tmp_path / "a.npz", per_parameter=True)
    by_value = GradientRecorder(tmp_path / "b.npz", per_parameter=True)
    steps = [
        (0, [_f16(1.0, 2.0**-20), _f16(0.0)], 8.0, True, None, 4.0, 0.01),
        (1, [_f16(np.inf, 1.0), _f16(3.0)], 8.0, True, 16.0, None, None),
        (2, [_f16(np.nan), _f16(1.0)], 4.0, False, None, None, 0.5),
    ]
    flush = (np.array([1.0, 2.0]), np.array([0.1, 0.0]))
    for step, grads, scale, loss_finite, over, finite, peak in steps:
        forward = None if peak is None else (peak, "Affine#0")
        names = ["fc/W", "fc/b"]
        by_hand.record(step, grads, scale, loss_finite, over, names, flush, finite, forward)
        measured = {"flush": flush} | ({} if forward is None else {"forward": forward})
        by_value.record_step(
            MeasuredStep(
                step=step,
                grads=grads,
                scale=scale,
                bad_batch=not loss_finite,
                overflow_scale=np.inf if over is None else over,
                finite_scale=finite or 0.0,
                names=names,
                measured=measured,
            )
        )
    a, b = by_hand.trace(), by_value.trace()
    for name in ("counts", "zeros", "absmax", "nonfinite", "overflow_scale", "finite_scale"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    for name in ("layer_counts", "layer_absmax", "flush_shares", "forward_peak"):
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True)
    assert a.forward_where == b.forward_where == ("Affine#0", "", "Affine#0")
    assert a.overflow_scale.tolist() == [np.inf, 8.0, np.inf]  # overflowed at its scale
    by_hand.close(), by_value.close()


def test_a_measured_step_is_built_by_keyword_and_checked():
    with pytest.raises(TypeError, match="positional"):
        MeasuredStep(0, [_f16(1.0)], 1.0)
    with pytest.raises(ValueError, match="scale"):
        MeasuredStep(step=0, grads=[_f16(1.0)], scale=0.0)
    with pytest.raises(ValueError, match="overflow_scale must be a number > 0 or None"):
        MeasuredStep(step=0, grads=[_f16(1.0)], scale=1.0, overflow_scale=True)


def test_the_recorder_counts_what_each_step_says(tmp_path):
    """Probe passes and whether the threshold was probed travel in the step value."""
    rec = GradientRecorder(tmp_path / "t.npz")
    assert (rec.probe_passes, rec.overflow_probed) == (0, False)
    for step, passes in enumerate((3, 2)):
        rec.record_step(
            MeasuredStep(
                step=step,
                grads=[_f16(1.0)],
                scale=2.0,
                overflow_probed=True,
                probe_passes=passes,
            )
        )
    assert (rec.probe_passes, rec.overflow_probed) == (5, True)
    assert rec.trace().overflow_probed
    rec.close()


@dataclasses.dataclass(frozen=True)
class _Loss(Group):
    """A group a new probe would add: one module, its place in ``GROUPS``."""

    probe_loss: np.ndarray

    KEY: ClassVar[str] = "loss_probe"
    KINDS: ClassVar[dict] = {"probe_loss": "number"}
    SHAPES: ClassVar[dict] = {"probe_loss": ("steps",)}

    @classmethod
    def checked(cls, trace, probe_loss):
        return cls(np.asarray(probe_loss, np.float64))

    @classmethod
    def row_checked(cls, value) -> dict:
        return {"probe_loss": float(value)}

    @classmethod
    def unmeasured_row(cls, part: dict) -> dict:
        return {"probe_loss": np.nan}


def test_a_new_group_travels_from_the_step_to_the_trace_with_no_other_change(tmp_path, monkeypatch):
    groups = trace_format.GROUPS + (_Loss,)
    monkeypatch.setattr(trace_format, "GROUPS", groups)
    monkeypatch.setattr(trace_rows, "GROUPS", groups)
    monkeypatch.setattr(trace_recorder, "GROUPS", groups)
    rec = GradientRecorder(tmp_path / "t.npz")
    for step, measured in enumerate(({"loss_probe": 0.25}, {})):
        rec.record_step(MeasuredStep(step=step, grads=[_f16(1.0)], scale=1.0, measured=measured))
    found = rec.trace().loss_probe.probe_loss
    assert found[0] == 0.25 and np.isnan(found[1])
    rec.close()


def _probed_updater(m, rec):
    """An updater of the tiny model ``m`` recording into ``rec`` with overflow probes."""
    from updater import DynamicLossScalingUpdater, DynamicScale, Probes

    policy = DynamicScale(init_scale=2.0**10)
    probes = Probes(overflow=True)
    return DynamicLossScalingUpdater(
        m.solver, m.loss, m.feeder(), policy=policy, recorder=rec, probes=probes
    )


@pytest.mark.nnabla
def test_the_updater_leaves_the_users_recorder_as_made(tmp_path, tiny):
    """Building the updater, or assigning its probes, changes nothing of the recorder; the
    recorded steps say they were probed."""
    from updater import Probes

    rec = GradientRecorder(tmp_path / "t.npz")
    made = (repr(rec), rec.overflow_probed, rec.probe_passes)
    u = _probed_updater(tiny("made"), rec)
    u.probes = Probes(overflow=False)
    u.probes = Probes(overflow=True)
    assert (repr(rec), rec.overflow_probed, rec.probe_passes) == made
    u.update()
    assert rec.overflow_probed and rec.probe_passes > 0 and rec.trace().overflow_probed
    rec.close()


def test_a_measured_step_keeps_the_number_it_was_given_as_a_float():
    step = MeasuredStep(step=0, grads=[_f16(1.0)], scale=np.float16(2.0), finite_scale=1)
    assert (type(step.scale), type(step.finite_scale)) == (float, float)
    assert (step.scale, step.finite_scale) == (2.0, 1.0)
    for bad in (np.nan, np.inf, -1.0, np.float32(0.0)):
        with pytest.raises(ValueError, match="scale must be a finite number > 0"):
            MeasuredStep(step=0, grads=[_f16(1.0)], scale=bad)
    with pytest.raises(TypeError, match="scale must be a finite number > 0"):
        MeasuredStep(step=0, grads=[_f16(1.0)], scale=True)
    with pytest.raises(ValueError, match="finite_scale must be a finite number >= 0"):
        MeasuredStep(step=0, grads=[_f16(1.0)], scale=1.0, finite_scale=np.nan)


def test_the_recorder_keeps_a_step_without_its_gradients_and_names(tmp_path):
    """What a step costs held in memory until written: its histogram summed over the arrays
    (per array only with ``per_parameter``), no gradients and no names."""
    grads, names = [_f16(1.0, 0.0), _f16(np.inf)], ["a", "b"]
    for per_parameter, rows in ((False, 1), (True, 2)):
        rec = GradientRecorder(tmp_path / f"{per_parameter}.npz", per_parameter=per_parameter)
        rec.record(0, grads, 4.0, names=names)
        (kept,) = rec._kept
        assert kept.step.grads == [] and kept.arrays.counts.shape == (rows, NBINS)
        assert kept.step.names == (names if per_parameter else None)
        assert kept.step.overflow_scale == 4.0  # overflowed at its scale
        rec.close()


STEP_MODULES = {
    "updater/driver/recording/hook",
    "updater/driver/recording/probes",
    "updater/trace/measured",
    "updater/trace/recorder",
}
"""The modules of the recording a recorded step with overflow probes enters (besides the
plain step's and the forward state's copy): issue 51's at most 15 modules."""


@pytest.mark.nnabla
def test_a_recorded_step_with_overflow_probes_makes_its_row_when_written(tmp_path, tiny):
    """Per recorded step the recorder keeps the step; the trace's groups, the checks and the
    probe options are not entered (the row is made when the trace is written)."""
    from benchmarks.common import Counted

    rec = GradientRecorder(tmp_path / "t.npz")
    u = _probed_updater(tiny("entered"), rec)
    u.update()
    with Counted() as counted:
        u.update()
    entered = {m for m in counted.calls if m.startswith(("updater/trace/", "updater/common/"))}
    entered |= {m for m in counted.calls if m.startswith("updater/driver/recording/")}
    assert "updater/driver/probe_options" not in counted.calls
    assert entered == STEP_MODULES
    assert rec.trace().overflow_probed and rec.close() is not None
