"""The recorder's merge survives a kill (SIGKILL, Ctrl-C) at any moment of close(): no
recorded step is lost, and recover() never replaces a longer trace with a shorter one; an
unwritable trace at exit makes the process exit non-zero. Real processes, real signals."""

import os
import random
import signal
import subprocess
import sys

import numpy as np
import pytest

from tests.paths import ROOT
from tests.updater.trace.test_recorder_faults import _full_disk
from updater.trace import Trace
from updater.trace.parts import part_files, parts_dir
from updater.trace.recorder import GradientRecorder

STEPS = 60
CLOSE = """
import os, sys, time
sys.path.insert(0, {root!r})
import numpy as np
from pathlib import Path
from updater.trace.recorder import GradientRecorder
rec = GradientRecorder({path!r}, write_every=1)
for step in range({steps}):
    rec.record(step, [np.full(4, step + 1, np.float16)], 1024.0)
if {kill_after_first_unlink}:  # killed right after the merged trace's first part is removed
    unlink = Path.unlink
    def unlink_then_die(self, *a, **k):
        unlink(self, *a, **k)
        os.kill(os.getpid(), 9)
    Path.unlink = unlink_then_die
print("closing", flush=True)
start = time.monotonic()
rec.close()
print(time.monotonic() - start, flush=True)
"""


def _start(path, kill_after_first_unlink=False):
    script = CLOSE.format(
        root=str(ROOT), path=str(path), steps=STEPS, kill_after_first_unlink=kill_after_first_unlink
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "closing\n"
    return proc


def _steps_after(path) -> int:
    """The steps a user gets back: the trace, after recover() when parts are left."""
    if part_files(path) or parts_dir(path).exists():
        GradientRecorder.recover(path)
    assert not parts_dir(path).exists()
    return Trace.load(path).steps


def test_a_kill_after_the_merged_trace_is_written_loses_no_step(tmp_path):
    path = tmp_path / "t.npz"
    proc = _start(path, kill_after_first_unlink=True)
    assert proc.wait(timeout=120) == -signal.SIGKILL
    assert len(part_files(path)) == STEPS - 1 and Trace.load(path).steps == STEPS
    rec = GradientRecorder(path)  # a new recorder finishes the interrupted merge
    rec.close()
    assert not parts_dir(path).exists() and Trace.load(path).steps == STEPS


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM])
def test_a_signal_at_a_random_moment_of_close_loses_no_step(tmp_path, sig):
    full = _start(tmp_path / "full.npz")
    duration = float(full.stdout.readline())
    full.wait(timeout=120)
    rng = random.Random(sig)
    for trial in range(20):
        path = tmp_path / f"t{trial}.npz"
        proc = _start(path)
        try:
            proc.wait(timeout=rng.uniform(0, duration * 1.2))
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, sig)
        proc.wait(timeout=120)
        assert _steps_after(path) == STEPS, (trial, proc.returncode)


def test_recover_never_replaces_a_longer_trace_with_fewer_steps(tmp_path):
    path = tmp_path / "t.npz"
    rec = GradientRecorder(path)
    for step in range(5):
        rec.record(step, [np.ones(4, np.float16)], 1.0)
    rec.close()
    rec = GradientRecorder(path, write_every=1)
    rec.record(0, [np.ones(4, np.float16)], 1.0)  # one part, then the process "dies"
    rec._exit_hook.detach()
    rec._lock.pop().release()
    with pytest.raises(ValueError, match="holds 5 steps, its parts in .* 1: not replacing"):
        GradientRecorder.recover(path)
    assert Trace.load(path).steps == 5 and len(part_files(path)) == 1


def test_an_unclosed_recorder_that_cannot_write_at_exit_exits_non_zero(tmp_path):
    path, proc = _full_disk(tmp_path, close=False)
    assert "ERROR: GradientRecorder could not write" in proc.stderr
    assert proc.returncode == 1


def test_a_lock_the_file_system_refuses_leaves_no_lock_file(tmp_path, monkeypatch):
    import errno
    import fcntl

    def no_locks(fd, how):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with pytest.raises(OSError, match="cannot lock .*t.npz.parts/lock: No locks available"):
        GradientRecorder(tmp_path / "t.npz")
    assert list(tmp_path.iterdir()) == []


def test_recover_after_a_merge_stopped_before_removing_its_folder_keeps_the_trace(tmp_path):
    """Ctrl-C between the merge's last unlink and the folder's removal (seen once in the
    random-signal test): the trace is whole, the folder empty of parts; recover() removes it."""
    path = tmp_path / "t.npz"
    rec = GradientRecorder(path, write_every=1)
    for step in range(3):
        rec.record(step, [np.ones(4, np.float16)], 1.0)
    rec.close()
    parts_dir(path).mkdir()
    assert GradientRecorder.recover(path) == path
    assert not parts_dir(path).exists() and Trace.load(path).steps == 3
