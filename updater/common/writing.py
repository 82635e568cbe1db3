"""The one way this package writes a file: :func:`write_file`, for every output (checkpoints,
traces, measured runs, the report, figures, CSV, markdown).

Five rules, checked by :func:`check_target` before anything is written (so a command can check
its outputs before any work too):

- **Atomic.** The content goes to a temporary file in the target's folder, named
  ``<name>.dls-tmp.<host>.<PID namespace>.<pid>.<8 hex>.part`` (``<name>`` shortened so the
  whole fits the file system's longest name), is fsynced and renamed over the target: a crash
  or a full disk never leaves a truncated file under the real name, and the previous file
  stays intact. A replaced file's permission bits survive (0600 stays 0600). Before writing,
  the temporary files of this package's killed writers are deleted: only names with its
  token, this host and this PID namespace whose process is gone (never a live writer's, never
  a file without the token; none on Windows).
- **Never through a symbolic link.** A link (dangling or not) at the target is refused; with
  ``overwrite=True`` the link itself is replaced by the file, its target is left alone.
- **Never a file it did not write, nor one of another kind.** An existing file is replaced only
  if its content proves that this package wrote it as the same kind of file
  (:func:`updater.common.identity.kind_of`: a checkpoint only a checkpoint, a trace only a
  trace, a CSV only a CSV, a figure only one of the same format), unless ``overwrite=True``.
  A copy or a move of such a file keeps its proof; no bookkeeping file is written. Folders,
  FIFOs and devices are always refused.
- **Never a read-only file** (no write permission for this user, e.g. ``chmod 444``) unless
  ``overwrite=True``, which keeps its mode.
- **Never an input.** A target that is one of ``inputs`` (the same file, or the same path) is
  always refused.

All or nothing: everything that can fail (the content, its flush and fsync, the close) happens
before the rename; once renamed the write has succeeded. No write takes a lock. A refusal
raises :class:`UnsafeOutputError` (a ``FileExistsError``), one line naming the file (control
characters escaped, :func:`updater.common.names.shown`) and the way to replace it; a failed
write raises the ``OSError`` with the target's path in its message, and the previous file is
intact.
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

from .identity import KINDS, kind_label, kind_of, mark_text
from .names import shown

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
_TEMP = re.compile(
    rf".+\.{_TOKEN}\.{re.escape(_HOST)}\.{_NAMESPACE}\.(\d+)\.[0-9a-f]{{8}}\.part", re.S
)


class UnsafeOutputError(FileExistsError):
    """Writing the target would destroy something this package must not touch: a file it did
    not write, a link's target, a folder or special file, or an input."""


# ---------------------------------------------------------------- the rules


def check_target(
    path: PathLike,
    overwrite: bool = False,
    inputs: Iterable[PathLike] = (),
    *,
    kind: str,
    hint: str = "--force/overwrite=True replaces it",
) -> Path:
    """Raise :class:`UnsafeOutputError` unless :func:`write_file` may write ``path`` as a
    ``kind`` of file.

    Args:
        path (str or Path): the file to write.
        overwrite (bool, default False): replace an existing regular file (or a link) that
            this package did not write, wrote as another kind, or that is read-only.
        inputs (iterable of paths): files the caller reads; ``path`` must not be one of them.
        kind (str): what is written: a key of :data:`updater.common.identity.KINDS`
            (``"checkpoint"``, ``"csv"``, ``"png"``...) or another file suffix (``"jpg"``,
            ``"h5"``: such a file cannot prove who wrote it, and only ``overwrite`` replaces
            one).
        hint (str, default "--force/overwrite=True replaces it"): the way to replace the
            file, which a refusal names (a caller without ``overwrite`` says its own).

    Returns:
        Path: ``path``.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "notes.md").write_text("mine")
    >>> try:
    ...     check_target(folder / "notes.md", kind="markdown")
    ... except UnsafeOutputError as e:
    ...     print(str(e).replace(str(folder), "<folder>"))
    <folder>/notes.md: not written by dls; not replacing it (--force/overwrite=True replaces it)
    """
    path = Path(path)
    for source in inputs:
        if _same_file(path, Path(source)):
            raise UnsafeOutputError(
                f"{shown(path)}: an input of this command; write the output to another file"
            )
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as e:  # a name too long, a folder that is a file: name the target
        raise OSError(e.errno, f"cannot write {shown(path)}: {e.strerror or e}") from None
    if stat.S_ISLNK(info.st_mode):
        if not overwrite:
            link = f"a symbolic link (to {shown(os.readlink(path))})"
            raise UnsafeOutputError(
                f"{shown(path)}: {link}; dls never writes through a link ({hint}: the link "
                "itself, never its target)"
            )
    elif not stat.S_ISREG(info.st_mode):
        what = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise UnsafeOutputError(f"{shown(path)}: {what}; give a file name")
    elif not overwrite:
        _check_replaceable(path, info, kind, hint)
    return path


def _check_replaceable(path: Path, info: os.stat_result, kind: str, hint: str) -> None:
    """Raise :class:`UnsafeOutputError` (naming ``hint``) unless the regular file ``path``
    (``info``: its lstat) proves that dls wrote it as a ``kind`` and this user may write it."""
    found = kind_of(path)
    if found is None and kind not in KINDS:
        why = f"exists, and {kind_label(kind)} cannot show that dls wrote it"
    elif found is None:
        why = "not written by dls"
    elif found != kind:
        why = f"{kind_label(found)} written by dls, not {kind_label(kind)}"
    elif _read_only(info):
        why = f"read-only (mode {stat.S_IMODE(info.st_mode):04o})"
        hint = f"chmod u+w makes it writable; {hint}"
    else:
        return
    raise UnsafeOutputError(f"{shown(path)}: {why}; not replacing it ({hint})")


def _read_only(info: os.stat_result) -> bool:
    """Whether the mode of ``info`` denies this user writing (root included: the bit for
    the file's owner, group or others that applies, as ``chmod 444`` means it)."""
    if not hasattr(os, "geteuid"):
        return not info.st_mode & stat.S_IWRITE
    if info.st_uid == os.geteuid():
        bit = stat.S_IWUSR
    elif info.st_gid == os.getegid() or info.st_gid in os.getgroups():
        bit = stat.S_IWGRP
    else:
        bit = stat.S_IWOTH
    return not info.st_mode & bit


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
    *,
    kind: str,
) -> Path:
    """Call ``write(f)`` on a binary file that replaces ``path`` only once it is complete,
    after :func:`check_target`. ``write`` must write the content's proof
    (:mod:`updater.common.identity`) for a later write of the same ``kind`` to replace the
    file without ``overwrite``.

    Args:
        path (str or Path): the target; its folder must exist.
        write (callable): writes the content to the open binary file it is given.
        overwrite (bool, default False), inputs (paths), kind (str): as in
            :func:`check_target`.

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
    check_target(path, overwrite, inputs, kind=kind)
    try:
        atomic_write(path, write)
    except OSError as e:  # the temporary file's name would only confuse: name the target
        raise OSError(e.errno, f"cannot write {shown(path)}: {e.strerror or e}") from None
    return path


def write_text(
    path: PathLike, text: str, overwrite: bool = False, inputs=(), csv: bool = False
) -> Path:
    """Write ``text`` (UTF-8) with its marker (:func:`updater.common.identity.mark_text`: a
    last line, or with ``csv`` a last cell of the header line) to ``path`` with
    :func:`write_file`, as a ``markdown`` file (or a ``csv`` one)."""
    data = mark_text(text, csv)
    kind = "csv" if csv else "markdown"
    return write_file(path, lambda f: f.write(data), overwrite, inputs, kind=kind)


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write ``path`` through a temporary file and a rename, without the ownership rules (for
    the package's own working files, e.g. a recorder's parts): everything that can fail
    happens before the rename. A regular file replaced keeps its permission bits; a new one
    gets those of any new file (``0o666`` less the umask). After a power loss the name holds
    the old file or the new one (fsynced before the rename); :func:`sync_folder` makes the
    rename itself durable."""
    remove_orphans(path.parent)
    try:
        old = os.lstat(path)
        keep = stat.S_IMODE(old.st_mode) & 0o777 if stat.S_ISREG(old.st_mode) else None
    except FileNotFoundError:
        keep = None
    tmp = _temp_path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    # The try is entered before the file exists, so that a signal landing right after os.open
    # (a KeyboardInterrupt before ``fd`` is even assigned) still removes it; the name (this
    # process's ID and 32 random bits) is this call's, so whatever is under it is its own.
    try:
        fd = os.open(tmp, flags, 0o666)  # the umask applies, as for any new file
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            if keep is not None and hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), keep)
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
    """The temporary file for ``path``: its name, shortened when needed so the whole fits the
    folder's longest name (``NAME_MAX``, 255 bytes on most file systems), and this writer's
    suffix."""
    suffix = f".{_TOKEN}.{_HOST}.{_NAMESPACE}.{os.getpid()}.{secrets.token_hex(4)}.part"
    room = max(1, name_max(path.parent) - len(os.fsencode(suffix)))
    return path.parent / (os.fsdecode(os.fsencode(path.name)[:room]) + suffix)


def name_max(folder: Path) -> int:
    """The longest file name ``folder``'s file system takes, in bytes (``NAME_MAX``; 255
    where the system does not say)."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (AttributeError, OSError, ValueError):
        return 255


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
