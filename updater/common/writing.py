"""The one way this package writes a file: :func:`write_file`, for every output (checkpoints,
traces, measured runs, the report, figures, CSV, markdown).

Four rules, checked by :func:`check_target` before anything is written (so a command can check
its outputs before any work too):

- **Atomic.** The content goes to a temporary file in the target's folder, named
  ``<name>.dls-tmp.<host>.<PID namespace>.<pid>.<8 hex>.part``, is fsynced and renamed over the
  target: a crash or a full disk never leaves a truncated file under the real name, and the
  previous file stays intact. Before writing, the temporary files of this package's killed
  writers are deleted: only names with its token, this host and this PID namespace whose
  process is gone (never a live writer's, never a file without the token; none on Windows).
- **Never through a symbolic link.** A link (dangling or not) at the target is refused; with
  ``overwrite=True`` the link itself is replaced by the file, its target is left alone.
- **Never a file it did not write.** An existing file is replaced only if it says by its own
  content that this package wrote it (:func:`updater.common.identity.written_by_dls`: an
  archive member, a PNG text chunk, a marker line holding the text's SHA-256, so a file the
  user edited since is refused), unless ``overwrite=True``. A copy or a move of such a file
  keeps its identity; no bookkeeping file is written. Folders, FIFOs and devices are always
  refused.
- **Never an input.** A target that is one of ``inputs`` (the same file, or the same path) is
  always refused.

All or nothing: everything that can fail (the content, its flush and fsync, the close) happens
before the rename; once renamed the write has succeeded. No write takes a lock. A refusal
raises :class:`UnsafeOutputError` (a ``FileExistsError``); a failed write raises the
``OSError`` with the target's path in its message, and the previous file is intact.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
import stat
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Union

from .identity import mark_text, written_by_dls

PathLike = Union[str, Path]

_HOST = re.sub(r"[^A-Za-z0-9-]", "_", socket.gethostname()) or "host"
_TOKEN = "dls-tmp"
"""Marks the temporary files only this package writes; cleanup touches no other file."""


def _pid_namespace() -> str:
    """This process's PID namespace (the inode of ``/proc/self/ns/pid``; "0" where there is
    none): a PID means a process only within its namespace."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


_NAMESPACE = _pid_namespace()
_TEMP = re.compile(rf".+\.{_TOKEN}\.{re.escape(_HOST)}\.{_NAMESPACE}\.(\d+)\.[0-9a-f]{{8}}\.part")


class UnsafeOutputError(FileExistsError):
    """Writing the target would destroy something this package must not touch: a file it did
    not write, a link's target, a folder or special file, or an input."""


# ---------------------------------------------------------------- the rules


def check_target(path: PathLike, overwrite: bool = False, inputs: Iterable[PathLike] = ()) -> Path:
    """Raise :class:`UnsafeOutputError` unless :func:`write_file` may write ``path``.

    Args:
        path (str or Path): the file to write.
        overwrite (bool, default False): replace an existing regular file (or a link) that
            this package did not write.
        inputs (iterable of paths): files the caller reads; ``path`` must not be one of them.

    Returns:
        Path: ``path``.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "notes.md").write_text("mine")
    >>> try:
    ...     check_target(folder / "notes.md")
    ... except UnsafeOutputError as e:
    ...     print(str(e).replace(str(folder), "<folder>"))
    <folder>/notes.md: not written by dls; not replacing it (--force/overwrite=True replaces it)
    """
    path = Path(path)
    for source in inputs:
        if _same_file(path, Path(source)):
            raise UnsafeOutputError(
                f"{path}: an input of this command; write the output to another file"
            )
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return path
    if stat.S_ISLNK(mode):
        if not overwrite:
            raise UnsafeOutputError(
                f"{path}: a symbolic link (to {os.readlink(path)}); dls never writes through "
                "a link (--force/overwrite=True replaces the link itself)",
            )
    elif not stat.S_ISREG(mode):
        what = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise UnsafeOutputError(f"{path}: {what}; give a file name")
    elif not overwrite and not written_by_dls(path):
        raise UnsafeOutputError(
            f"{path}: not written by dls; not replacing it (--force/overwrite=True replaces it)",
        )
    return path


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # either is missing: compare the paths
        return os.path.abspath(a) == os.path.abspath(b)


# ---------------------------------------------------------------- writing


def write_file(
    path: PathLike,
    write: Callable[[BinaryIO], object],
    overwrite: bool = False,
    inputs: Iterable[PathLike] = (),
) -> Path:
    """Call ``write(f)`` on a binary file that replaces ``path`` only once it is complete,
    after :func:`check_target`. ``write`` must write the content's marker
    (:mod:`updater.common.identity`) for a later write to replace the file without
    ``overwrite``.

    Args:
        path (str or Path): the target; its folder must exist.
        write (callable): writes the content to the open binary file it is given.
        overwrite (bool, default False), inputs (paths): as in :func:`check_target`.

    Returns:
        Path: ``path``.

    Raises:
        UnsafeOutputError: :func:`check_target` refused ``path``; nothing was written.
        OSError: the write failed (a full disk, a file-size limit, a missing folder, no
            permission); the message names ``path``, the previous file at ``path`` is intact
            and no temporary file is left.

    >>> import tempfile
    >>> p = write_text(Path(tempfile.mkdtemp()) / "x.md", "done")
    >>> p.read_text().splitlines()[0], write_text(p, "again").read_text().splitlines()[0]
    ('done', 'again')
    """
    path = Path(path)
    check_target(path, overwrite, inputs)
    try:
        atomic_write(path, write)
    except OSError as e:  # the temporary file's name would only confuse: name the target
        raise OSError(e.errno, f"cannot write {path}: {e.strerror or e}") from None
    return path


def write_text(
    path: PathLike, text: str, overwrite: bool = False, inputs=(), csv: bool = False
) -> Path:
    """Write ``text`` (UTF-8) with its marker (:func:`updater.common.identity.mark_text`: a
    last line, or with ``csv`` a last cell of the header line) to ``path`` with
    :func:`write_file`."""
    data = mark_text(text, csv)
    return write_file(path, lambda f: f.write(data), overwrite, inputs)


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write ``path`` through a temporary file and a rename, without the ownership rules (for
    the package's own working files, e.g. a recorder's parts): everything that can fail
    happens before the rename. After a power loss the name holds the old file or the new one
    (fsynced before the rename); :func:`sync_folder` makes the rename itself durable."""
    remove_orphans(path.parent)
    tmp = _temp_path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    fd = os.open(tmp, flags, 0o666)  # the umask applies, as for any new file
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def sync_folder(folder: Path) -> None:
    """fsync ``folder`` so the names renamed or removed in it are durable (best effort: some
    systems cannot fsync a folder; nothing is reported)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _temp_path(path: Path) -> Path:
    name = f"{path.name}.{_TOKEN}.{_HOST}.{_NAMESPACE}.{os.getpid()}.{secrets.token_hex(4)}"
    return path.parent / f"{name}.part"


def _alive(pid: int) -> bool:
    if os.name != "posix":  # os.kill(pid, 0) would terminate the process on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def remove_orphans(folder: PathLike) -> None:
    """Delete the temporary files this package's killed writers left in ``folder`` (best
    effort): only names with its token, this host and this PID namespace, whose process is
    gone."""
    for entry in os.scandir(folder):
        match = _TEMP.fullmatch(entry.name)
        if match and not _alive(int(match.group(1))):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
