"""GradientRecorder under bad paths, a second writer, a full disk and foreign parts (issue 29,
item 7), on real files and real processes."""

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.paths import ROOT
from updater.trace import Trace
from updater.trace.parts import part_files, parts_dir, write_part
from updater.trace.recorder import GradientRecorder

BAD_PATHS = {
    "a missing folder": (lambda t: t / "nowhere" / "t.npz", "folder .*nowhere does not exist"),
    "a folder under a file": (
        lambda t: (t / "file").write_text("x") and t / "file" / "t.npz",
        "folder .*file is not a folder",
    ),
    "a folder as the trace": (lambda t: (t / "d").mkdir() or t / "d", "it is a folder"),
    "a .parts that is a file": (
        lambda t: (t / "t.npz.parts").write_text("x") and t / "t.npz",
        r".*t.npz.parts is a file, not the folder of its parts",
    ),
}


@pytest.mark.parametrize("case", list(BAD_PATHS))
def test_a_bad_path_is_refused_at_construction_and_nothing_is_created(case, tmp_path):
    make, message = BAD_PATHS[case]
    path = make(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(OSError, match=f"cannot record a trace to {path}: {message}"):
        GradientRecorder(path)
    assert sorted(tmp_path.rglob("*")) == before


def _record(rec, steps, start=0):
    for step in range(start, start + steps):
        rec.record(step, [np.full(3, 2.0**-step, np.float16)], 1.0)


def test_a_second_recorder_on_one_path_is_refused_until_the_first_closes(tmp_path):
    path = tmp_path / "t.npz"
    first = GradientRecorder(path, write_every=2)
    with pytest.raises(RuntimeError, match=r"another GradientRecorder .* is writing .*t.npz"):
        GradientRecorder(path)
    code = f"from updater.trace.recorder import GradientRecorder; GradientRecorder({str(path)!r})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "parts/lock is locked" in proc.stderr  # another process
    _record(first, 5)
    with pytest.raises(RuntimeError, match="is locked"):
        GradientRecorder.recover(path)  # no merge under a live recorder
    assert Trace.load(first.close()).steps == 5 and not parts_dir(path).exists()
    second = GradientRecorder(path)  # free again
    _record(second, 1)
    assert Trace.load(second.close()).steps == 1


def test_a_recorder_used_again_after_close_takes_the_lock_again(tmp_path):
    path = tmp_path / "t.npz"
    rec = GradientRecorder(path)
    _record(rec, 1)
    rec.close()
    _record(rec, 1, start=1)
    with pytest.raises(RuntimeError, match="is locked"):
        GradientRecorder(path)
    assert Trace.load(rec.close()).steps == 2


FULL_DISK = """
import resource, signal, sys
sys.path.insert(0, {root!r})
import numpy as np
from updater.trace.recorder import GradientRecorder
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (600, 600))
rec = GradientRecorder({path!r}, write_every={write_every})
for step in range(40):
    rec.record(step, [np.random.default_rng(step).standard_normal(50).astype(np.float16)], 1.0)
if {close}:
    try:
        rec.close()
    except OSError as e:
        print("close raised:", e)
"""


def _full_disk(tmp_path, close: bool, write_every=None):
    path = tmp_path / "t.npz"
    code = FULL_DISK.format(root=str(ROOT), path=str(path), close=close, write_every=write_every)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return path, proc


def test_a_failed_final_write_raises_from_close(tmp_path):
    path, proc = _full_disk(tmp_path, close=True)
    assert proc.stdout.startswith(f"close raised: [Errno 27] cannot write {path}: File too large")
    assert not path.exists()


def test_an_unclosed_recorder_that_cannot_write_says_so_loudly_at_exit(tmp_path):
    path, proc = _full_disk(tmp_path, close=False)
    assert f"ERROR: GradientRecorder could not write {path} at exit, 40 recorded steps" in (
        proc.stderr
    )
    assert "Exception ignored" not in proc.stderr and not path.exists()


def _part(path, index, layers: bool):
    rec = GradientRecorder(path.parent / f"src{index}.npz", per_parameter=layers)
    rec.record(0, [np.ones(2, np.float16)], 1.0, names=["a"] if layers else None)
    write_part(path, index, rec.trace())


@pytest.mark.parametrize("first_has_layers", [True, False])
def test_parts_of_two_recordings_are_a_clear_error_naming_the_part(first_has_layers, tmp_path):
    path = tmp_path / "t.npz"
    _part(path, 0, first_has_layers)
    _part(path, 1, not first_has_layers)
    with pytest.raises(ValueError, match=r"trace part .*part-00000001.npz: per-layer statistics"):
        GradientRecorder.recover(path)
    assert len(part_files(path)) == 2 and not path.exists()  # nothing merged, nothing lost


def test_a_fifo_part_is_refused_by_type(tmp_path):
    path = tmp_path / "t.npz"
    _part(path, 0, False)
    os.mkfifo(parts_dir(path) / "part-00000001.npz")
    with pytest.raises(OSError, match=r"part-00000001.npz: a FIFO, not a regular file"):
        GradientRecorder.recover(path)


def test_recorded_step_numbers_are_dropped_with_the_written_parts(tmp_path):
    rec = GradientRecorder(tmp_path / "t.npz", write_every=5)
    held = []
    for step in range(23):
        _record(rec, 1, start=step)
        held.append(len(rec.steps))
    assert max(held) == 4 and rec.steps == [20, 21, 22]
    assert Trace.load(rec.close()).steps == 23


@pytest.mark.parametrize("kind", ["a file of the user's", "a link"])
def test_a_path_dls_may_not_replace_is_refused_at_construction(tmp_path, kind):
    path, target = tmp_path / "t.npz", tmp_path / "elsewhere.npz"
    target.write_bytes(b"the user's")
    path.symlink_to(target) if kind == "a link" else path.write_bytes(b"the user's")
    with pytest.raises(OSError, match="not written by dls|symbolic link"):
        GradientRecorder(path)
    assert target.read_bytes() == b"the user's" and not parts_dir(path).exists()
    assert path.read_bytes() == b"the user's"


def test_a_trace_it_wrote_is_recorded_again_and_parts_leave_no_folder(tmp_path):
    path = tmp_path / "t.npz"
    for _ in range(2):  # the second recorder replaces the first one's trace
        with GradientRecorder(path, write_every=2) as rec:
            _record(rec, 5)
    assert Trace.load(path).steps == 5 and not parts_dir(path).exists()
