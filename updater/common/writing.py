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
- **Never a file it did not write.** An existing file is replaced only if this package wrote
  it there: the folder's manifest ``.dls-written.json`` lists the SHA-256 of every file written
  into it, and the file must still hold that content (a file the user made or edited since is
  refused) unless ``overwrite=True``. Folders, FIFOs and devices are always refused.
- **Never an input.** A target that is one of ``inputs`` (the same file, or the same path) is
  always refused.

A refusal raises :class:`UnsafeOutputError` (a ``FileExistsError``); a failed write raises the
``OSError`` with the target's path in its message.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import socket
import stat
from pathlib import Path
from typing import BinaryIO, Callable, Dict, Iterable, Iterator, Union

try:
    import fcntl
except ImportError:  # Windows: the manifest is updated without a lock
    fcntl = None  # type: ignore[assignment]

PathLike = Union[str, Path]

MANIFEST = ".dls-written.json"
"""The file, in every folder this package writes into, that lists what it wrote there."""
_MANIFEST_NOTE = "files dls wrote into this folder (SHA-256); dls replaces only these"

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
            raise UnsafeOutputError(f"{path}: an input of this command; "
                                    "write the output to another file")  # fmt: skip
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
    elif not overwrite and not _wrote(path):
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
    after :func:`check_target`, and record the file in its folder's manifest.

    Args:
        path (str or Path): the target; its folder must exist.
        write (callable): writes the content to the open binary file it is given.
        overwrite (bool, default False), inputs (paths): as in :func:`check_target`.

    Returns:
        Path: ``path``.

    Raises:
        UnsafeOutputError: :func:`check_target` refused ``path``; nothing was written.
        OSError: the write failed (a full disk, a missing folder, no permission); the message
            names ``path``, the previous file at ``path`` is intact and no temporary file is
            left.

    >>> import tempfile
    >>> p = write_file(Path(tempfile.mkdtemp()) / "x.txt", lambda f: f.write(b"done"))
    >>> p.read_bytes(), write_file(p, lambda f: f.write(b"again")).read_bytes()
    (b'done', b'again')
    """
    path = Path(path)
    try:
        with _folder_lock(path.parent):
            check_target(path, overwrite, inputs)
            digest = atomic_write(path, write)
            _record(path, digest)
    except UnsafeOutputError:
        raise
    except OSError as e:  # the temporary file's name would only confuse: name the target
        raise OSError(e.errno, f"cannot write {path}: {e.strerror or e}") from None
    return path


def write_text(path: PathLike, text: str, overwrite: bool = False, inputs=()) -> Path:
    """Write ``text`` (UTF-8) to ``path`` with :func:`write_file`."""
    return write_file(path, lambda f: f.write(text.encode("utf-8")), overwrite, inputs)


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> str:
    """Write ``path`` through a temporary file and a rename, without the ownership rules (for
    the package's own working files: the manifest, a recorder's parts); return the content's
    SHA-256 (hex)."""
    remove_orphans(path.parent)
    tmp = _temp_path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    fd = os.open(tmp, flags, 0o666)  # the umask applies, as for any new file
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        digest = _sha256(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return digest


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


# ---------------------------------------------------------------- the manifest


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_manifest(folder: Path) -> Dict[str, str]:
    """The manifest's entries (name -> SHA-256); empty when missing or unreadable (then no file
    counts as written by this package, which only makes it refuse more)."""
    try:
        files = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not isinstance(files, dict):
        return {}
    return {str(k): str(v) for k, v in files.items()}


def _wrote(path: Path) -> bool:
    recorded = _read_manifest(path.parent).get(path.name)
    return recorded is not None and recorded == _sha256(path)


def _record(path: Path, digest: str) -> None:
    """Add ``path`` to its folder's manifest (entries of files gone since are dropped)."""
    folder = path.parent
    files = _read_manifest(folder)
    files[path.name] = digest
    files = {n: d for n, d in sorted(files.items()) if os.path.lexists(folder / n)}
    text = json.dumps({"about": _MANIFEST_NOTE, "files": files}, indent=1) + "\n"
    atomic_write(folder / MANIFEST, lambda f: f.write(text.encode("utf-8")))


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` (flock on the folder itself: no lock file), so two
    processes writing into one folder do not lose each other's manifest entries."""
    if fcntl is None:
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
