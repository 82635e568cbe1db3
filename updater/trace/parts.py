"""A trace written in parts while it is recorded: each part is a :class:`updater.trace.Trace`
file in the folder ``<trace path>.parts``, written atomically; merging them (in order) gives the
trace, written atomically to its path. NumPy only.

Each part holds the id of its recording (``recording``, one per recorder): the parts of
another recording are never merged into this one.

Crash-safe merge: the merged trace is durable (fsynced, its folder too) and read back before
the file ``merged`` is written (durably) into the parts folder, naming the parts merged and the
trace's steps; only then are the parts removed. A merge interrupted at any moment (SIGKILL,
Ctrl-C) is finished by the next one: with ``merged`` present, and the trace holding the steps it
names, only the parts it names are removed; any other ``merged`` is stale and removed alone,
and the parts, all still there, are merged again.

One writer per trace path: :class:`PartsLock` takes an exclusive ``flock`` on the file ``lock``
in the parts folder (held by a recorder from its construction to its close, and by a merge).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import weakref
from pathlib import Path
from typing import List, Union

import numpy as np

from ..common.names import shown
from ..common.npz import read_npz, write_npz
from ..common.writing import atomic_write, check_target, name_max, sync_folder
from .archive import trace_arrays
from .format import GROUPS, Trace

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock
    _HAS_FLOCK = False
else:
    _HAS_FLOCK = True

LOCK_NAME = "lock"
MERGED_NAME = "merged"
"""Written into the parts folder once the merged trace is durable: the parts it names are
done."""
RECORDING = "recording"
"""The array of a part that holds its recording's id."""


def parts_dir(path: Union[str, Path]) -> Path:
    """The folder of the parts of the trace at ``path``: ``<path>.parts``; when that name would
    be longer than the file system takes (a trace name of 250-255 bytes), the trace's name cut
    to fit, then 8 hex digits of its SHA-256, then ``.parts``."""
    path = Path(path)
    name = os.fsencode(path.name)
    room = name_max(path.parent)
    if len(name) + len(b".parts") <= room:
        return Path(f"{path}.parts")
    digest = hashlib.sha256(name).hexdigest()[:8]
    return path.parent / f"{os.fsdecode(name[: room - 15])}.{digest}.parts"


def part_files(path: Union[str, Path]) -> List[Path]:
    """The part files of the trace at ``path``, in recording order (none: empty)."""
    return sorted(parts_dir(path).glob("part-*.npz"))


def check_trace_path(path: Union[str, Path]) -> Path:
    """``path`` as a Path if a trace can be recorded there: its folder exists, it is not a
    folder and ``<path>.parts`` is not a file, else an ``OSError`` naming the problem; and
    :func:`updater.common.writing.check_target` accepts it (not a link, not a file dls did
    not write: an :class:`updater.common.writing.UnsafeOutputError`)."""
    path = Path(path)
    problem = None
    if not path.parent.is_dir():
        what = "is not a folder" if path.parent.exists() else "does not exist"
        problem = (errno.ENOENT, f"folder {shown(path.parent)} {what}")
    elif path.is_dir():
        problem = (errno.EISDIR, "it is a folder; give a file name")
    elif parts_dir(path).exists() and not parts_dir(path).is_dir():
        problem = (
            errno.ENOTDIR,
            f"{shown(parts_dir(path))} is a file, not the folder of its parts",
        )
    if problem:
        raise OSError(problem[0], f"cannot record a trace to {shown(path)}: {problem[1]}")
    hint = "remove it, or record to another path"  # a recorder has no overwrite
    return check_target(path, kind="trace", hint=hint)  # not a link, nor a user's file


class PartsLock:
    """The exclusive lock of the trace at ``path``: an ``flock`` on ``<path>.parts/lock``
    (creating the folder), held until :meth:`release` or until the object is collected.
    Without ``flock`` (not POSIX) it holds nothing.

    Raises:
        RuntimeError: another recorder (or a merge) holds it.
    """

    def __init__(self, path: Union[str, Path]):
        self.path = Path(path)
        fd = _acquire(self.path) if _HAS_FLOCK else None
        self._release = weakref.finalize(self, _unlock, self.path, fd)

    def release(self) -> None:
        """Release the lock, removing the lock file, and the parts folder when no part is
        left in it (again: nothing)."""
        self._release()

    def __enter__(self) -> PartsLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _acquire(path: Path) -> int:
    folder = parts_dir(path)
    while True:
        folder.mkdir(exist_ok=True)
        fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RuntimeError(
                f"another GradientRecorder (or a merge of its parts) is writing {shown(path)}: "
                f"{shown(folder / LOCK_NAME)} is locked; give each recorder its own path"
            ) from None
        except OSError as e:  # ENOLCK (a network file system): leave nothing behind
            _unlock(path, fd)
            raise OSError(
                e.errno, f"cannot lock {shown(folder / LOCK_NAME)}: {e.strerror}"
            ) from None
        with contextlib.suppress(OSError):  # the lock file we hold is still the folder's
            if os.fstat(fd).st_ino == os.stat(folder / LOCK_NAME).st_ino:
                return fd
        os.close(fd)  # its holder removed it while we waited: take the new one


def _unlock(path: Path, fd: int | None) -> None:
    if fd is None:
        return
    folder = parts_dir(path)
    with contextlib.suppress(OSError):
        if os.fstat(fd).st_ino == os.stat(folder / LOCK_NAME).st_ino:
            for temp in folder.glob("*.part"):  # a write a signal stopped left it; only the
                temp.unlink()  # lock's holder writes here, and it writes no more
            os.unlink(folder / LOCK_NAME)
    with contextlib.suppress(OSError):
        folder.rmdir()  # only if empty
    os.close(fd)


def load_parts(path: Union[str, Path], recording: str | None = None) -> List[Trace]:
    """The parts of the trace at ``path``, read in order and checked to be of one recording:
    one id (``recording`` when given, else the id most parts hold) and each group's
    :meth:`~updater.trace.group.Group.stranger` (per-layer statistics in all or none, flush
    curves of one width); a ``ValueError`` naming the first part that is not."""
    files = part_files(path)
    traces = [Trace.load(f) for f in files]
    ids = [recording_of(f) for f in files]
    own = recording if recording is not None else max(ids, key=ids.count, default="")
    found = next(((i, "of another recording") for i, x in enumerate(ids) if x != own), None)
    for group in GROUPS if found is None else ():
        odd = group.stranger([getattr(t, group.KEY) for t in traces]) if traces else None
        if odd is not None:
            found = (odd[0], f"{odd[1]} than {files[0].name}")
            break
    if found is not None:
        raise ValueError(
            f"trace part {shown(files[found[0]])}: {found[1]}: parts of different recordings are "
            f"mixed in {shown(parts_dir(path))}; move the others out and merge again"
        )
    return traces


def recording_of(part: Path) -> str:
    """The recording id the part file ``part`` holds ("" in parts written before ids)."""
    z = read_npz(part, "trace part", select=lambda declared: {RECORDING} & set(declared))
    return z.scalar(RECORDING, "text") if RECORDING in z else ""


def write_part(path: Union[str, Path], index: int, trace: Trace, recording: str = "") -> Path:
    """Write ``trace`` as part number ``index`` of the trace at ``path``, of the recording
    whose id is ``recording``."""
    folder = parts_dir(path)
    folder.mkdir(exist_ok=True)
    part = folder / f"part-{index:08d}.npz"
    arrays = {**trace_arrays(trace, GROUPS), RECORDING: recording}
    atomic_write(part, lambda f: write_npz(f, arrays, "trace", compress=True))  # a working file
    return part


def concat_traces(traces: List[Trace], name: str) -> Trace:
    """The steps of ``traces`` one after the other, each group by its
    :meth:`~updater.trace.group.Group.concat` (per-layer columns aligned by name, flush
    measurements NaN where a part has none, probed only if every part is)."""
    return Trace(
        np.concatenate([t.counts for t in traces]),
        np.concatenate([t.zeros for t in traces]),
        np.concatenate([t.absmax for t in traces]),
        np.concatenate([t.nonfinite for t in traces]),
        name,
        every=_one_every(traces),
        **{group.KEY: group.concat(traces) for group in GROUPS},
    )


def _one_every(traces: List[Trace]) -> int:
    """The ``every`` the parts of one recording share."""
    found = sorted({t.every for t in traces})
    if len(found) > 1:
        raise ValueError(f"trace parts recorded with different every {found} do not concatenate")
    return found[0]


def merge_parts(
    path: Union[str, Path], name: str | None = None, recording: str | None = None
) -> Path:
    """Write the trace at ``path`` from its parts (of the recording ``recording``; None: the
    one most parts are of), read it back, then remove them (see the module doc: a merge
    interrupted earlier is finished, never redone with fewer parts); return ``path``.

    The caller holds the path's :class:`PartsLock`; releasing it removes the folder.

    Raises:
        FileNotFoundError: ``path`` has no parts.
        ValueError: a part is damaged or of another recording (named), or the trace written
            does not read back as merged.
    """
    if finish_merge(path):
        return Path(path)
    files = part_files(path)
    if not files:
        raise FileNotFoundError(f"{shown(parts_dir(path))} holds no trace parts to merge")
    traces = load_parts(path, recording)
    merged = concat_traces(traces, traces[0].name if name is None else name)
    written = merged.save(path)
    sync_folder(written.parent)  # the merged trace's name is durable before ...
    if Trace.load(written).steps != merged.steps:
        raise ValueError(f"{written} does not read back as the {merged.steps} steps merged")
    done = {"recording": recording_of(files[0]), "steps": merged.steps}
    done["parts"] = [f.name for f in files]
    atomic_write(parts_dir(path) / MERGED_NAME, lambda f: f.write(json.dumps(done).encode()))
    sync_folder(parts_dir(path))  # ... the mark that lets the parts go
    finish_merge(path)
    return written


def finish_merge(path: Union[str, Path]) -> bool:
    """Remove the parts of ``path`` a finished merge left and return True: ``merged`` names
    them and their recording, and the trace at ``path`` holds the steps it names. Else False
    (the parts, if any, are still to merge), removing a stale ``merged`` alone."""
    folder = parts_dir(path)
    mark = folder / MERGED_NAME
    if not mark.is_file():
        return False
    try:
        done = json.loads(mark.read_bytes())
        left = part_files(path)
        finished = (
            {f.name for f in left} <= set(done["parts"])
            and all(recording_of(f) == done["recording"] for f in left)
            and Trace.load(path).steps == done["steps"]
        )
    except (OSError, ValueError, TypeError, KeyError):
        finished = False
    if finished:
        for f in part_files(path):
            f.unlink()
        sync_folder(folder)
    mark.unlink()
    return finished


def recover_parts(path: Union[str, Path]) -> Path:
    """:meth:`updater.trace.recorder.GradientRecorder.recover`: merge the parts at ``path``
    or finish an interrupted merge, never replacing a longer trace."""
    path = check_trace_path(path)
    leftover = parts_dir(path).exists()
    with PartsLock(path):
        if finish_merge(path):
            return path
        if leftover and path.exists() and not part_files(path):
            return path  # a merge finished all but removing its folder (the lock's release does)
        if path.exists() and part_files(path):
            held = Trace.load(path).steps
            parts = sum(t.steps for t in load_parts(path))
            if held > parts:
                trace, folder = shown(path), shown(parts_dir(path))
                raise ValueError(
                    f"{trace} holds {held} steps, its parts in {folder} {parts}: "
                    f"not replacing it with fewer; move {trace} away to merge them"
                )
        return merge_parts(path)
