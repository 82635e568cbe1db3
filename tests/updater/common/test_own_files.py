"""Issue 50: a file is the package's own only when its content proves it, an output replaces
only a file of its own kind, a replaced file keeps its mode, a read-only file is refused, and
names (long, with control characters, undecodable) are written and shown; real files, the
public API (Trace.save, write_text, GradientRecorder)."""

import os
import shutil
import stat
import zipfile

import numpy as np
import pytest

from sim.replay.measured import run_path
from sim.traces.real import HELD_OUT_ORDERS, HELD_OUT_POLICIES
from tests.broken_files import damage
from tests.paths import SHIPPED_TRACES
from updater.common.identity import kind_of
from updater.common.writing import UnsafeOutputError, write_text
from updater.trace import Trace
from updater.trace.recorder import GradientRecorder

REPLACE = "(--force/overwrite=True replaces it)"


def _trace(name="t"):
    return Trace.from_steps([np.full(8, 1e-3)] * 4, name=name)


def _refused(save, path, words):
    """``save()`` raises a one-line UnsafeOutputError naming ``path`` and ``words``, and
    leaves the file's bytes as they were."""
    before = path.read_bytes()
    with pytest.raises(UnsafeOutputError) as e:
        save()
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"{path}: ") and words in message, message
    assert path.read_bytes() == before
    return message


def test_a_copy_of_a_trace_made_with_numpy_is_the_users(tmp_path):
    ours = _trace().save(tmp_path / "ours.npz")
    mine = tmp_path / "mine.npz"
    np.savez(mine, **dict(np.load(ours)))  # the same arrays, the marker member first
    _refused(
        lambda: _trace("new").save(mine), mine, f"not written by dls; not replacing it {REPLACE}"
    )
    assert Trace.load(mine).name == "t"  # still read as a trace
    shutil.copy(ours, tmp_path / "cp.npz")  # a byte copy keeps the proof
    _trace("new").save(tmp_path / "cp.npz")
    assert Trace.load(tmp_path / "cp.npz").name == "new"


def test_a_users_zip_whose_first_member_is_the_marker_is_the_users(tmp_path):
    path = tmp_path / "notes.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("written_by_dls.npy", b"anything")
        z.writestr("notes.txt", b"my notes")
    _refused(lambda: _trace().save(path), path, "not written by dls")


def test_a_trace_whose_bytes_were_edited_is_the_users(tmp_path):
    path = _trace().save(tmp_path / "t.npz")
    damage(path)  # bytes flipped inside a member: the zip directory and comment survive
    _refused(lambda: _trace().save(path), path, "not written by dls")


def test_an_output_replaces_only_a_file_of_its_own_kind(tmp_path):
    trace = _trace().save(tmp_path / "t.npz")
    report, table = (
        write_text(tmp_path / "r.md", "# r"),
        write_text(tmp_path / "s.csv", "a\n1", csv=True),
    )
    _refused(
        lambda: _trace().save(report),
        report,
        "a markdown file written by dls, not a gradient trace",
    )
    _refused(lambda: _trace().save(table), table, "a CSV file written by dls, not a gradient trace")
    _refused(
        lambda: write_text(trace, "a\n2", csv=True),
        trace,
        "a gradient trace written by dls, not a CSV file",
    )
    _refused(
        lambda: write_text(table, "# r"), table, "a CSV file written by dls, not a markdown file"
    )
    write_text(trace, "# forced", overwrite=True)  # --force/overwrite=True still replaces anything
    assert trace.read_text().startswith("# forced\n")


def test_a_replaced_file_keeps_its_mode(tmp_path):
    path = _trace().save(tmp_path / "t.npz")
    for mode in (0o600, 0o640, 0o755):
        path.chmod(mode)
        _trace("again").save(path)
        assert stat.S_IMODE(path.stat().st_mode) == mode


def test_a_read_only_file_is_refused_and_overwrite_keeps_its_mode(tmp_path):
    path = _trace().save(tmp_path / "t.npz")
    path.chmod(0o444)
    message = _refused(lambda: _trace("new").save(path), path, "read-only (mode 0444)")
    assert message.endswith("(chmod u+w makes it writable; --force/overwrite=True replaces it)")
    _trace("new").save(path, overwrite=True)
    assert Trace.load(path).name == "new" and stat.S_IMODE(path.stat().st_mode) == 0o444


@pytest.mark.parametrize("length", [230, 245, 255])
def test_names_up_to_the_longest_the_file_system_takes_are_written(tmp_path, length):
    trace = tmp_path / ("t" * (length - 4) + ".npz")
    report = tmp_path / ("r" * (length - 3) + ".md")
    for _ in range(2):  # written, then replaced
        _trace().save(trace)
        write_text(report, "# r")
    assert len(os.fsencode(trace.name)) == length and Trace.load(trace).name == "t"
    assert sorted(os.listdir(tmp_path)) == sorted([trace.name, report.name])  # no temporary


@pytest.mark.parametrize("length", [250, 255])
def test_a_recorder_writes_parts_and_trace_under_names_up_to_the_longest(tmp_path, length):
    path = tmp_path / ("g" * (length - 4) + ".npz")
    rec = GradientRecorder(path, write_every=2)  # parts in a folder beside the trace
    for step in range(5):
        rec.record(step, [np.full(4, 1e-3, np.float16)], 1.0)
    rec.close()
    assert Trace.load(path).steps == 5 and os.listdir(tmp_path) == [path.name]


def test_a_name_one_byte_too_long_fails_naming_the_file(tmp_path):
    path = tmp_path / ("t" * 252 + ".npz")
    with pytest.raises(OSError, match=r"cannot write .*t\.npz: File name too long"):
        _trace().save(path)
    assert os.listdir(tmp_path) == []


def test_control_characters_of_a_name_are_escaped_in_messages(tmp_path):
    path = tmp_path / "run\x1b[2J\x1b]0;pwned\x07.npz"
    path.write_text("mine")
    with pytest.raises(UnsafeOutputError) as e:
        _trace().save(path)
    with pytest.raises(ValueError) as read:
        Trace.load(path)
    for message in (str(e.value), str(read.value)):
        assert "\x1b" not in message and "\x07" not in message
        assert "run\\x1b[2J\\x1b]0;pwned\\x07.npz" in message


def test_a_recorder_writes_a_name_with_undecodable_bytes(tmp_path):
    path = os.fsdecode(os.fsencode(tmp_path) + b"/g\xff\xfe.npz")
    rec = GradientRecorder(path)
    for step in range(3):
        rec.record(step, [np.full(4, 1e-3, np.float16)], 1.0)
    rec.close()
    assert os.listdir(os.fsencode(tmp_path)) == [b"g\xff\xfe.npz"]
    assert Trace.load(path).name == "g??"  # as a text file holds such a byte


def test_shipped_traces_of_an_earlier_version_load_and_are_replaced_only_when_asked(tmp_path):
    shipped = sorted(SHIPPED_TRACES.glob("*.npz"))
    assert len([p for p in shipped if not p.name.endswith(".run.npz")]) == 8
    held_out = {  # the held-out runs were written with the proof, the rest before it existed
        run_path(SHIPPED_TRACES, model, label, k).name
        for model, orders in HELD_OUT_ORDERS.items()
        for k in orders
        for label in HELD_OUT_POLICIES
    }
    for path in shipped:  # written before the proof existed: no zip comment
        assert kind_of(path) == ("measured run" if path.name in held_out else None), path.name
    copy = tmp_path / "digits_mlp.npz"
    shutil.copy(SHIPPED_TRACES / "digits_mlp.npz", copy)
    steps = Trace.load(copy).steps
    _refused(lambda: _trace().save(copy), copy, "not written by dls")
    _trace().save(copy, overwrite=True)
    assert kind_of(copy) == "trace" and Trace.load(copy).steps == 4 != steps
