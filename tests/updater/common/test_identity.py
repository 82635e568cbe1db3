"""A file proves by its own content that dls wrote it (updater/common/identity.py): copies keep
their identity, edits lose it, no bookkeeping file decides, no lock is waited on; real files
and real processes. The proofs per kind: test_own_files.py."""

import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from updater.common.identity import written_by_dls
from updater.common.npz import read_npz, write_npz
from updater.common.writing import UnsafeOutputError, write_file, write_text

ROOT = Path(__file__).resolve().parents[3]


X = {"x": np.arange(3)}


def test_a_copy_alone_in_another_folder_is_still_replaced(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    for name, write in (
        ("t.npz", lambda p: write_file(p, lambda f: write_npz(f, X, "trace"), kind="trace")),
        ("r.md", lambda p: write_text(p, "# report\n")),
        ("s.csv", lambda p: write_text(p, "a,b\n1,2\n", csv=True)),
    ):
        write(tmp_path / "a" / name)
        shutil.copy(tmp_path / "a" / name, tmp_path / "b" / name)  # the copy, nothing else
        assert written_by_dls(tmp_path / "b" / name)
        write(tmp_path / "b" / name)  # replaced without overwrite
    assert sorted(os.listdir(tmp_path / "a")) == ["r.md", "s.csv", "t.npz"]  # nothing else


def test_an_npz_of_numpy_itself_is_not_ours_and_ours_reads_without_the_marker(tmp_path):
    np.savez(tmp_path / "users.npz", x=np.arange(3))
    with pytest.raises(UnsafeOutputError, match="not written by dls"):
        write_file(tmp_path / "users.npz", lambda f: write_npz(f, X, "trace"), kind="trace")
    path = write_file(tmp_path / "ours.npz", lambda f: write_npz(f, X, "trace"), kind="trace")
    assert list(read_npz(path, "test file").arrays) == ["x"]  # the marker member left out


def test_a_csv_keeps_its_columns_and_an_edited_cell_makes_it_the_users(tmp_path):
    path = write_text(tmp_path / "s.csv", "a,b\n1,-2\n", csv=True)
    (row,) = csv.DictReader(path.open())
    assert (row["a"], row["b"]) == ("1", "-2")
    write_text(path, "a,b\n3,4\n", csv=True)  # ours: replaced
    path.write_text(path.read_text().replace("3,4", "3,5"))  # the user's edit
    with pytest.raises(UnsafeOutputError, match="not written by dls"):
        write_text(path, "a,b\n6,7\n", csv=True)


def test_a_file_an_earlier_version_listed_in_its_manifest_is_the_users_now(tmp_path):
    old = tmp_path / "old.md"
    old.write_text("old report\n")
    digest = hashlib.sha256(b"old report\n").hexdigest()
    manifest = {"files": {"old.md": digest}}
    (tmp_path / ".dls-written.json").write_text(json.dumps(manifest))
    with pytest.raises(UnsafeOutputError, match="old.md: not written by dls"):
        write_text(old, "new report")  # a list beside it proves nothing of its content
    assert old.read_text() == "old report\n"
    assert (tmp_path / ".dls-written.json").read_text() == json.dumps(manifest)  # never written


WRITE = """
import sys
sys.path.insert(0, {root!r})
from pathlib import Path
from updater.common.writing import UnsafeOutputError, write_text
folder = Path({folder!r})
write_text(folder / "new.md", "new")
try:
    write_text(folder / "users.md", "over it")
except UnsafeOutputError:
    print("refused")
"""


def _run_write(folder: Path) -> subprocess.CompletedProcess:
    script = WRITE.format(root=str(ROOT), folder=str(folder))
    command = [sys.executable, "-c", script]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(120)
"""


def test_a_write_never_waits_for_a_lock_another_process_holds_on_the_folder(tmp_path):
    command = [sys.executable, "-c", HOLD, str(tmp_path)]
    holder = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        (tmp_path / "users.md").write_text("mine\n")
        proc = _run_write(tmp_path)  # times out after 60 s; the holder holds it 120 s
        assert proc.returncode == 0 and proc.stdout == "refused\n", proc.stderr
    finally:
        holder.kill()
        holder.wait()
    assert sorted(os.listdir(tmp_path)) == ["new.md", "users.md"]  # no lock file
