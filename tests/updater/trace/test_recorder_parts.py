"""GradientRecorder writing in parts (issue 23, item 7): bounded memory, the same trace after
merging, and what a killed run leaves (recover)."""

import signal
import subprocess
import sys

import numpy as np
import pytest

from tests.nnabla_models import TinyClassifier
from tests.paths import ROOT
from updater import DynamicLossScalingUpdater, GradientRecorder, Trace
from updater.trace.parts import part_files, parts_dir

FIELDS = (
    "counts",
    "zeros",
    "absmax",
    "nonfinite",
    "overflow_scale",
    "layer_counts",
    "layer_zeros",
    "layer_absmax",
)


def assert_same_trace(a: Trace, b: Trace) -> None:
    assert a.layer_names == b.layer_names and a.name == b.name
    for f in FIELDS:
        assert np.array_equal(getattr(a, f), getattr(b, f)), f


@pytest.mark.nnabla
def test_parts_keep_memory_bounded_and_merge_into_the_same_trace(tmp_path):
    traces = []
    for write_every in (None, 5):
        model = TinyClassifier(f"parts_{write_every}")
        path = tmp_path / f"t{write_every}.npz"
        rec = GradientRecorder(path, per_parameter=True, write_every=write_every, name="t")
        upd = DynamicLossScalingUpdater(model.solver, model.loss, model.feeder(), recorder=rec)
        held = []
        for _ in range(23):
            upd.update()
            held.append(len(rec._kept))
        if write_every:
            assert max(held) < 5 and len(part_files(path)) == 4  # 20 steps on disk, 3 in memory
            assert rec.trace().steps == 23
        traces.append(Trace.load(rec.close()))
        assert not parts_dir(path).exists()
    assert_same_trace(*traces)


KILLED = """
import os, signal, sys
sys.path.insert(0, {root!r})
import numpy as np
from updater import GradientRecorder
rec = GradientRecorder({path!r}, write_every=5)
for step in range(12):
    rec.record(step, [np.full(4, 2.0 ** -step, np.float16)], 1.0)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_run_loses_at_most_one_interval_and_recover_merges_the_rest(tmp_path):
    path = tmp_path / "run.npz"
    script = KILLED.format(root=str(ROOT), path=str(path))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert not path.exists() and len(part_files(path)) == 2
    with pytest.raises(ValueError, match=r"interrupted recording.*GradientRecorder.recover"):
        GradientRecorder(path)
    trace = Trace.load(GradientRecorder.recover(path))
    assert trace.steps == 10 and trace.absmax.tolist() == [2.0**-k for k in range(10)]
    assert not parts_dir(path).exists()


def test_a_layer_added_between_parts_is_aligned_by_name(tmp_path):
    calls = [(["a"], [np.ones(3, np.float16)])] * 3 + [
        (["a", "b"], [np.ones(3, np.float16), np.full(2, 4.0, np.float16)])
    ] * 4
    traces = []
    for write_every in (None, 2):
        rec = GradientRecorder(
            tmp_path / f"l{write_every}.npz", per_parameter=True, write_every=write_every, name="l"
        )
        for step, (names, grads) in enumerate(calls):
            rec.record(step, grads, 1.0, names=names)
        traces.append(Trace.load(rec.close()))
    assert_same_trace(*traces)
    assert traces[1].layer_names == ("a", "b") and traces[1].layer_zeros[:3, 1].tolist() == [0] * 3


def test_write_seconds_writes_a_part_when_the_interval_passed(tmp_path):
    rec = GradientRecorder(tmp_path / "s.npz", write_seconds=1e-9)
    for step in range(3):
        rec.record(step, [np.ones(2, np.float16)], 1.0)
    assert len(part_files(tmp_path / "s.npz")) == 3 and not rec._kept
    assert Trace.load(rec.close()).steps == 3


def test_bad_intervals_are_refused(tmp_path):
    with pytest.raises(ValueError, match="write_every"):
        GradientRecorder(tmp_path / "x.npz", write_every=0)
    with pytest.raises(ValueError, match="write_seconds"):
        GradientRecorder(tmp_path / "x.npz", write_seconds=-1.0)


def test_a_recorder_used_after_close_keeps_every_step(tmp_path):
    """As without parts: closing, recording more and closing again writes all the steps."""
    rec = GradientRecorder(tmp_path / "again.npz", write_every=2)
    for step in range(3):
        rec.record(step, [np.full(2, 2.0**-step, np.float16)], 1.0)
    assert Trace.load(rec.close()).steps == 3
    for step in range(3, 6):
        rec.record(step, [np.full(2, 2.0**-step, np.float16)], 1.0)
    trace = Trace.load(rec.close())
    assert trace.absmax.tolist() == [2.0**-k for k in range(6)]
    assert not parts_dir(tmp_path / "again.npz").exists()
