"""Issue 50, class 3: any sequence of record/close keeps every step; recover() merges only the
parts of its own recording and never removes a part before the merged trace is written and
read back; a SIGTERM (a job scheduler's time limit) writes the trace as Ctrl-C does, then ends
the process by SIGTERM. Real processes, real signals."""

import json
import os
import random
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from tests.paths import ROOT
from updater.trace import Trace
from updater.trace.parts import MERGED_NAME, part_files, parts_dir
from updater.trace.recorder import GradientRecorder

RECORD = """
import sys, time
sys.path.insert(0, {root!r})
import numpy as np
from updater.trace.recorder import GradientRecorder
rec = GradientRecorder({path!r}, write_every={write_every})
for step in range({steps}):
    rec.record(step, [np.full(4, step + 1, np.float16)], 1024.0)
    print(step, flush=True)
    if step == {close_at}:
        rec.close()  # and recording goes on, as a training script may do
    time.sleep({pause})
print("done", flush=True)
while True:  # the job runs on until its scheduler stops it
    time.sleep(0.01)
"""


def _start(path, steps, write_every=10, close_at=-1, pause=0.0):
    given = dict(steps=steps, write_every=write_every, close_at=close_at, pause=pause)
    script = RECORD.format(root=str(ROOT), path=str(path), **given)
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)


def _first_line(proc) -> str:
    """The first line ``proc`` printed, read byte by byte from its pipe: a buffered
    ``proc.stdout.readline()`` may take the next lines into a buffer that ``communicate()``
    (which reads the pipe itself) never sees, and the steps printed would be undercounted."""
    line = b""
    while not line.endswith(b"\n"):
        line += os.read(proc.stdout.fileno(), 1)
    return line.decode()


def _record(rec, steps, start=0):
    for step in range(start, start + steps):
        rec.record(step, [np.full(4, step + 1, np.float16)], 1024.0)


def test_closing_twice_with_steps_between_keeps_every_step(tmp_path):
    rec = GradientRecorder(tmp_path / "g.npz", write_every=10)
    _record(rec, 25)
    assert rec.close() == tmp_path / "g.npz" and Trace.load(tmp_path / "g.npz").steps == 25
    _record(rec, 3, start=25)
    assert rec.trace().steps == 28
    rec.close()
    trace = Trace.load(tmp_path / "g.npz")
    assert trace.steps == 28 and trace.absmax.tolist() == [(s + 1) / 1024 for s in range(28)]
    _record(rec, 12, start=28)  # a part again after a merge: the merged trace comes first
    rec._exit_hook()  # what interpreter exit runs on a recorder never closed again
    assert Trace.load(tmp_path / "g.npz").steps == 40 and not parts_dir(tmp_path / "g.npz").exists()


def test_a_process_that_closes_then_records_and_is_killed_by_sigterm_keeps_every_step(tmp_path):
    path = tmp_path / "g.npz"
    proc = _start(path, steps=28, close_at=24)
    for line in proc.stdout:
        if line == "done\n":
            break
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    assert Trace.load(path).steps == 28 and not parts_dir(path).exists()


def _crashed(path, steps):
    """A recording of ``steps`` steps in parts of 1 whose process was killed (SIGKILL)."""
    proc = _start(path, steps=steps, write_every=1)
    for line in proc.stdout:
        if line == "done\n":
            break
    proc.kill()
    proc.wait(timeout=60)
    assert len(part_files(path)) == steps and not path.exists()


def test_recover_refuses_a_part_of_another_recording_and_keeps_every_part(tmp_path):
    ours, theirs = tmp_path / "ours.npz", tmp_path / "theirs.npz"
    _crashed(ours, 5)
    _crashed(theirs, 6)
    stranger = parts_dir(ours) / "part-00000005.npz"  # where our next part would be
    shutil.copy(part_files(theirs)[5], stranger)
    with pytest.raises(ValueError, match=f"trace part {stranger}: of another recording"):
        GradientRecorder.recover(ours)
    assert len(part_files(ours)) == 6 and not ours.exists()
    stranger.unlink()
    assert GradientRecorder.recover(ours) == ours and Trace.load(ours).steps == 5


@pytest.mark.parametrize(
    "mark",
    [b"parts merged\n", json.dumps({"recording": "0", "steps": 3, "parts": []}).encode()],
    ids=["an earlier version's", "another merge's"],
)
def test_a_stale_merged_mark_beside_unmerged_parts_removes_no_part(tmp_path, mark):
    path = tmp_path / "g.npz"
    _crashed(path, 4)
    (parts_dir(path) / MERGED_NAME).write_bytes(mark)
    assert GradientRecorder.recover(path) == path
    assert Trace.load(path).steps == 4 and not parts_dir(path).exists()


@pytest.mark.parametrize("write_every", [1000, 3])
def test_sigterm_at_a_random_moment_writes_the_trace_then_ends_by_sigterm(tmp_path, write_every):
    rng = random.Random(write_every)
    for trial in range(12):
        path = tmp_path / f"t{trial}.npz"
        proc = _start(path, steps=40, write_every=write_every, pause=0.005)
        assert _first_line(proc) == "0\n"  # recording: a moment within its 40 steps
        wait = rng.uniform(0.0, 0.4)
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGTERM)
        seen = 1 + sum(x.isdigit() for x in proc.communicate(timeout=60)[0].split())
        assert proc.returncode == -signal.SIGTERM, (trial, wait)
        assert not parts_dir(path).exists(), (trial, wait)
        assert Trace.load(path).steps >= seen, (trial, wait, seen)


def test_a_sigterm_handler_the_program_set_is_left_alone(tmp_path):
    script = f"""
import os, signal, sys
sys.path.insert(0, {str(ROOT)!r})
import numpy as np
from updater.trace.recorder import GradientRecorder
signal.signal(signal.SIGTERM, lambda *a: sys.exit(3))  # the program's own
rec = GradientRecorder({str(tmp_path / "g.npz")!r})
rec.record(0, [np.ones(4, np.float16)], 8.0)
os.kill(os.getpid(), signal.SIGTERM)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert Trace.load(tmp_path / "g.npz").steps == 1  # written at exit, as always


def test_sigkill_at_a_random_moment_after_a_close_loses_no_written_step(tmp_path):
    """Recording goes on in parts after a close() merged 25 steps: a SIGKILL at any moment
    leaves, after recover(), every step written so far (the merged ones and each part)."""
    rng = random.Random(9)
    for trial in range(12):
        path = tmp_path / f"t{trial}.npz"
        proc = _start(path, steps=60, write_every=10, close_at=24, pause=0.004)
        assert _first_line(proc) == "0\n"
        wait = rng.uniform(0.05, 0.5)
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            proc.kill()
        seen = 1 + sum(x.isdigit() for x in proc.communicate(timeout=60)[0].split())
        if part_files(path) or parts_dir(path).exists():
            try:
                GradientRecorder.recover(path)
            except FileNotFoundError:  # killed before its first part: nothing was written
                assert not path.exists() and seen <= 11, (trial, seen)
        # A part is written before its last step is printed; close() runs after step 24 is
        # printed, so only a 26th printed step proves the merge of 25 finished.
        durable = 10 * (seen // 10) if seen <= 25 else 25 + 10 * ((seen - 25) // 10)
        steps = Trace.load(path).steps if path.exists() else 0
        assert durable <= steps <= seen + 1 and not parts_dir(path).exists(), (trial, seen)
