"""Writing files atomically: the one way this package writes a file it must not leave half done.

:func:`atomic_write` writes to a temporary file in the target's folder, named
``<name>.<host>.<pid>.<8 hex>.part``, fsyncs it and renames it over the target, so a crash
never leaves a truncated file under the real name. The file gets the mode of any new file
(``0o666`` less the umask). Before writing, it deletes the temporary files that killed writers
on this host left in the folder: those whose process no longer exists (a live writer's file is
never touched, nor one from another host; on Windows none is deleted).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
from pathlib import Path
from typing import BinaryIO, Callable, Union

_HOST = re.sub(r"[^A-Za-z0-9-]", "_", socket.gethostname()) or "host"
_TEMP = re.compile(rf".+\.{re.escape(_HOST)}\.(\d+)\.[0-9a-f]{{8}}\.part")


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


def remove_orphans(folder: Union[str, Path]) -> None:
    """Delete temporary files of killed writers on this host in ``folder`` (best effort)."""
    for entry in os.scandir(folder):
        match = _TEMP.fullmatch(entry.name)
        if match and not _alive(int(match.group(1))):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def _temp_path(path: Path) -> Path:
    return path.parent / f"{path.name}.{_HOST}.{os.getpid()}.{secrets.token_hex(4)}.part"


def atomic_write(path: Union[str, Path], write: Callable[[BinaryIO], object]) -> Path:
    """Call ``write(f)`` on a binary file that replaces ``path`` only once it is complete.

    Args:
        path (str or Path): the target; its folder must exist.
        write (callable): writes the content to the open binary file it is given.

    Returns:
        Path: ``path``.

    >>> import tempfile
    >>> p = atomic_write(Path(tempfile.mkdtemp()) / "x.txt", lambda f: f.write(b"done"))
    >>> p.read_bytes()
    b'done'
    """
    path = Path(path)
    folder = path.parent
    remove_orphans(folder)
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
    return path


def atomic_write_text(path: Union[str, Path], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` with :func:`atomic_write`."""
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))
