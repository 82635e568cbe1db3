"""The one writer (updater/common/writing.py): atomic, never through a link, never a file the
package did not write unless asked, never an input; on real files."""

import os
import signal

import pytest

from updater.common.writing import (
    UnsafeOutputError,
    atomic_write,
    check_target,
    write_file,
    write_text,
)


def _listing(folder):
    return sorted(p.name for p in folder.iterdir())


def test_a_users_file_is_refused_and_kept_unless_overwrite(tmp_path):
    users = tmp_path / "README.md"
    users.write_text("my notes")
    with pytest.raises(UnsafeOutputError, match="README.md: not written by dls; not replacing"):
        write_text(users, "report")
    assert users.read_text() == "my notes" and _listing(tmp_path) == ["README.md"]
    write_text(users, "report", overwrite=True)
    assert users.read_text().splitlines()[0] == "report"


def test_a_file_it_wrote_is_replaced_until_someone_edits_it(tmp_path):
    path = write_text(tmp_path / "table.md", "one")
    write_text(path, "two")  # its own file: replaced without asking
    assert path.read_text().splitlines()[0] == "two" and _listing(tmp_path) == ["table.md"]
    assert path.read_text().splitlines()[1].startswith("<!-- written by nnabla-dls; sha256 ")
    edited = path.read_text().replace("two", "two, and my edit")  # the marker line kept
    path.write_text(edited)  # edited since: no longer only dls's (the hash tells)
    with pytest.raises(UnsafeOutputError, match="not written by dls"):
        write_text(path, "three")
    assert path.read_text() == edited


def test_a_link_is_never_written_through(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("precious")
    link = tmp_path / "out.txt"
    link.symlink_to(target)
    with pytest.raises(UnsafeOutputError, match="symbolic link .*never writes through"):
        write_text(link, "output")
    assert link.is_symlink() and target.read_text() == "precious"
    write_text(link, "output", overwrite=True)  # replaces the link itself
    assert not link.is_symlink() and link.read_text().splitlines()[0] == "output"
    assert target.read_text() == "precious"


def test_a_dangling_link_creates_nothing_elsewhere(tmp_path):
    link = tmp_path / "out.txt"
    link.symlink_to(tmp_path / "sub" / "created.txt")
    (tmp_path / "sub").mkdir()
    with pytest.raises(UnsafeOutputError, match="symbolic link"):
        write_text(link, "output")
    assert _listing(tmp_path / "sub") == [] and link.is_symlink()


def test_an_input_is_never_the_output_even_when_asked(tmp_path):
    trace = tmp_path / "run.npz"
    trace.write_bytes(b"input")
    (tmp_path / "alias").symlink_to(tmp_path, target_is_directory=True)
    for same in (trace, tmp_path / "alias" / "run.npz", tmp_path / "." / "run.npz"):
        with pytest.raises(UnsafeOutputError, match="an input of this command"):
            write_text(same, "rows", overwrite=True, inputs=[trace])
    assert trace.read_bytes() == b"input"


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_folder_or_special_file_is_refused(tmp_path, kind):
    path = tmp_path / "out"
    path.mkdir() if kind == "folder" else os.mkfifo(path)
    with pytest.raises(UnsafeOutputError, match="a folder|not a regular file"):
        check_target(path, overwrite=True, kind="markdown")


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing(tmp_path):
    path = write_text(tmp_path / "fig.png", "old")
    old = path.read_bytes()

    def fail(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match=r"cannot write .*fig.png: No space left on device"):
        write_file(path, fail, kind="markdown")
    assert path.read_bytes() == old and _listing(tmp_path) == ["fig.png"]


@pytest.mark.skipif(not hasattr(signal, "raise_signal"), reason="needs signal.raise_signal")
def test_a_signal_right_after_the_temporary_file_is_made_leaves_nothing(tmp_path, monkeypatch):
    """A real SIGINT delivered the moment os.open has made the temporary file, before its
    descriptor reaches atomic_write (seen once in ~120 SIGTERM trials): before, the file was
    left behind; the old file stays as it was."""
    (tmp_path / "part.npz").write_bytes(b"old")
    real_open = os.open

    def open_then_signal(name, *args, **kwargs):
        fd = real_open(name, *args, **kwargs)
        if str(name).endswith(".part"):
            monkeypatch.setattr(os, "open", real_open)
            signal.raise_signal(signal.SIGINT)  # Python's handler raises KeyboardInterrupt
        return fd

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    monkeypatch.setattr(os, "open", open_then_signal)
    try:
        with pytest.raises(KeyboardInterrupt):
            atomic_write(tmp_path / "part.npz", lambda f: f.write(b"new"))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert _listing(tmp_path) == ["part.npz"] and (tmp_path / "part.npz").read_bytes() == b"old"
