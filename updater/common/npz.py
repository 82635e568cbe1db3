""".npz archives: the one way this package reads one (checkpoints, gradient traces, measured
runs), and the writing of one into an open file (:mod:`updater.common.writing` makes the file).

:func:`read_npz` reads a whole ``.npz`` archive or raises an ``OSError`` (missing, unreadable, a
folder, a special file) or a ``ValueError`` (empty, truncated, not an archive, a damaged or
pickled array, too large unpacked) whose message names the file and the problem; its
:class:`NpzContent` gives the arrays through checked accessors whose errors name the file and
the array too. :func:`write_npz` writes what ``np.savez`` writes, without leaving a half-closed
zip behind when the disk is full.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, Iterable, Mapping, Tuple, Union

import numpy as np

from .identity import MARK, NPZ_MARKER, npz_proof, zip_comment
from .names import shown

# ---------------------------------------------------------------- .npz archives


def write_npz(f: BinaryIO, arrays: Mapping[str, Any], kind: str, compress: bool = False) -> None:
    """Write ``arrays`` to the open binary file ``f`` as an ``.npz`` archive, as ``np.savez``
    does (never pickling), with the marker member ``written_by_dls.npy`` first
    (:func:`read_npz` leaves it out) and the zip comment proving that this package wrote it
    as a ``kind`` (:mod:`updater.common.identity`). Unlike ``np.savez``, a write that fails (a
    full disk) leaves no half-closed zip behind to print ``Exception ignored in:
    ZipFile.__del__`` later.

    Args:
        f (binary file): open for writing, e.g. the one
            :func:`updater.common.writing.write_file` passes.
        arrays (mapping str -> array-like): the arrays by name (the archive's entries).
        kind (str): ``"checkpoint"``, ``"trace"`` or ``"measured run"``.
        compress (bool, default False): deflate the entries, as ``np.savez_compressed``.
    """
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    archive = zipfile.ZipFile(f, mode="w", compression=method, allowZip64=True)
    marked = {NPZ_MARKER: np.array(MARK), **arrays}  # the marker first: read from the head
    try:
        for name, value in marked.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as entry:
                np.lib.format.write_array(entry, np.asanyarray(value), allow_pickle=False)
        archive.comment = npz_proof(kind, archive)
        archive.close()
    except BaseException:
        with contextlib.suppress(Exception):
            archive.close()  # lets go of f whatever it raises: nothing left for __del__
        raise


_KINDS = {
    "float": ("f", "a float array"),
    "int": ("iu", "an integer array"),
    "bool": ("b", "a bool array"),
    "number": ("iuf", "a number"),
    "text": ("U", "a string"),
}


class NpzContent:
    """The arrays of one ``.npz`` archive (read whole by :func:`read_npz`) and checked ways to
    take them: every error is a ``ValueError`` naming the file and the array.

    Attributes:
        path (Path): the file read.
        what (str): what the file should be, for messages ("checkpoint", "gradient trace").
        arrays (dict str -> numpy.ndarray): every entry read, by name.
        declared (dict str -> (shape, dtype)): every entry of the archive (the marker left
            out), as its header declares it, read or not.
    """

    def __init__(
        self, path: Path, what: str, arrays: Dict[str, np.ndarray], declared: Dict | None = None
    ):
        self.path, self.what, self.arrays = path, what, arrays
        self.declared = (
            {k: (v.shape, v.dtype) for k, v in arrays.items()} if declared is None else declared
        )

    def __contains__(self, name: str) -> bool:
        return name in self.arrays

    def error(self, problem: str) -> ValueError:
        """``ValueError("<what> <path>: <problem>")``, to raise."""
        return ValueError(f"{self.what} {shown(self.path)}: {problem}")

    def require(self, *names: str, hint: str = "") -> None:
        """Raise :meth:`error` naming the arrays of ``names`` the file lacks (``hint`` appended)."""
        missing = [n for n in names if n not in self.arrays]
        if missing:
            listed = ", ".join(repr(n) for n in missing)
            raise self.error(f"lacks the array{'s' if len(missing) > 1 else ''} {listed}{hint}")

    def array(self, name: str, kind: str, label: str | None = None) -> np.ndarray:
        """The array ``name``, which must be of ``kind``: "float", "int", "bool", "number" (int
        or float) or "text"; ``label`` names it in the message (default ``array 'name'``)."""
        self.require(name)
        value = self.arrays[name]
        codes, wanted = _KINDS[kind]
        if value.dtype.kind not in codes:
            label = label or f"array {name!r}"
            raise self.error(f"{label} has dtype {value.dtype.str}, expected {wanted}")
        return value

    def scalar(self, name: str, kind: str):
        """The single value ``name`` (a 0-d array of ``kind``, see :meth:`array`) as a Python
        int, float, bool or str."""
        value = self.array(name, kind)
        if value.ndim != 0:
            raise self.error(f"array {name!r} has shape {value.shape}, expected a single value")
        return value.item()

    def json(self, name: str) -> Any:
        """The JSON text ``name`` (a 0-d string array), decoded."""
        text = self.scalar(name, "text")
        try:
            return json.loads(text)
        except ValueError as e:
            raise self.error(f"array {name!r} is not valid JSON ({e})") from None
        except RecursionError:
            raise self.error(f"array {name!r} is nested too deeply to be read") from None


MAX_TEXT = 2**16
"""The most characters one text value of a file this package reads may hold (a name, a JSON
updater state): a longer one is refused before it is inflated."""


def dtype_problem(dtype: np.dtype) -> str | None:
    """What is wrong with an array's declared ``dtype`` for a file this package reads, or None:
    the kinds :class:`NpzContent` takes (bool, int, float of at most 8 bytes, text of at most
    :data:`MAX_TEXT` characters), checked from the header before anything is inflated (a 0-d
    ``<U268435456``, ``V1073741824`` or ``S1073741824`` would cost a GiB)."""
    if dtype.hasobject:
        return "holds pickled Python objects"
    if dtype.kind == "U" and dtype.itemsize <= 4 * MAX_TEXT:
        return None
    if dtype.kind in "biuf" and dtype.itemsize <= 8:
        return None
    if dtype.kind == "U":
        return (
            f"declares text of {dtype.itemsize // 4:,} characters, more than the {MAX_TEXT:,} "
            "a file of this package holds"
        )
    return f"has dtype {dtype.str}, which no file of this package holds"


def memory_bytes() -> int:
    """The machine's physical memory in bytes (8 GiB where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return 8 * 2**30


Select = Callable[[Dict[str, Tuple[tuple, np.dtype]]], Iterable[str]]


def read_npz(
    path: Union[str, Path], what: str, max_bytes: int | None = None, select: Select | None = None
) -> NpzContent:
    """Read the arrays of the ``.npz`` archive at ``path``, never unpickling.

    Nothing is decompressed before the archive's declared sizes are checked: their sum against
    ``max_bytes``, each array's header against its entry's size, its dtype
    (:func:`dtype_problem`: a kind and itemsize this package writes), and the declared shapes by
    ``select``, so a small file that unpacks to gigabytes (a decompression bomb) is refused at
    once.

    Args:
        path (str or Path): the file: a regular file (a FIFO or a device is refused, never
            opened).
        what (str): what the file should be, for messages ("checkpoint", "gradient trace").
        max_bytes (int or None, default None): the most bytes the arrays may hold unpacked;
            None: half the machine's physical memory.
        select (callable or None, default None): called with every entry's declared
            ``(shape, dtype)`` by name (from the array headers, nothing inflated) before any
            array is read; returns the names to read, or raises ``ValueError(problem)`` to
            refuse the file. None: read them all.

    Returns:
        NpzContent: the arrays, with checked accessors.

    Raises:
        OSError: the file is missing, a folder, not a regular file or unreadable (the message
            names it).
        ValueError: the file is empty, truncated or not an ``.npz`` archive, a single ``.npy``
            array, holds an entry twice, would unpack to more than ``max_bytes``, or holds an
            array that is damaged, pickled, of a dtype this package never writes or not a NumPy
            array (the message names the file and the problem).

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "cut.npz"
    >>> np.savez(path, a=np.arange(3))
    >>> read_npz(path, "test file").array("a", "int").tolist()
    [0, 1, 2]
    >>> _ = path.write_bytes(path.read_bytes()[:100])
    >>> try:
    ...     read_npz(path, "test file")
    ... except ValueError as e:
    ...     print(str(e).replace(str(path), "<path>"))
    test file <path>: truncated or not an .npz archive (no zip directory at its end)
    """
    path = Path(path)
    limit = memory_bytes() // 2 if max_bytes is None else max_bytes
    try:
        kind = os.stat(path).st_mode
        if not (stat.S_ISREG(kind) or stat.S_ISDIR(kind)):  # open() says what a folder is
            raise OSError(
                errno.EINVAL,
                f"{_SPECIAL.get(stat.S_IFMT(kind), 'a special file')}, not a regular file",
            )
        with open(path, "rb") as f:
            arrays, declared = _read_archive(f, lambda p: _fail(path, what, p), limit, select)
            return NpzContent(path, what, arrays, declared)
    except OSError as e:
        raise OSError(e.errno, f"cannot read {what} {shown(path)}: {e.strerror or e}") from None


_SPECIAL = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}  # fmt: skip


def _declared(archive: zipfile.ZipFile, name: str) -> Tuple[tuple, np.dtype]:
    """Entry ``name``'s declared ``(shape, dtype)``; ``ValueError`` unless its array header
    declares as many bytes as the entry holds (read_array would allocate what the header says
    before reading)."""
    with archive.open(name) as entry:
        version = np.lib.format.read_magic(entry)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0}.get(
            version, np.lib.format.read_array_header_2_0
        )
        shape, _, dtype = read_header(entry)
        header = entry.tell()
    if dtype.hasobject:
        return shape, dtype  # refused by the caller
    expected = header + int(np.prod(shape, dtype=object)) * dtype.itemsize
    size = archive.getinfo(name).file_size
    if expected != size:
        raise ValueError(f"its header declares {expected:,} bytes, the entry holds {size:,}")
    return shape, dtype


def _fail(path: Path, what: str, problem: str) -> ValueError:
    return ValueError(f"{what} {shown(path)}: {problem}")


def _read_archive(
    f: BinaryIO, fail: Callable[[str], ValueError], limit: int, select: Select | None
) -> Tuple[Dict[str, np.ndarray], Dict[str, Tuple[tuple, np.dtype]]]:
    with _open_archive(f, fail) as archive:
        declared = _declared_entries(archive, fail, limit)
        try:
            wanted = set(declared if select is None else select(declared))
        except ValueError as e:
            raise fail(str(e)) from None
        arrays = {
            key: _entry(archive, f"{key}.npy", key, fail, _read)
            for key in declared
            if key in wanted
        }
    return arrays, declared


def _open_archive(f: BinaryIO, fail: Callable[[str], ValueError]) -> zipfile.ZipFile:
    """The zip archive of ``f``; ``fail`` for an empty file, an ``.npy`` or a file without a
    whole zip directory at its end."""
    head = f.read(6)
    if not head:
        raise fail("the file is empty (0 bytes), not an .npz archive")
    if head == b"\x93NUMPY":
        raise fail("a single NumPy array (.npy), not an .npz archive")
    f.seek(0)
    try:
        archive = zipfile.ZipFile(f)
        if zip_comment(f, os.fstat(f.fileno()).st_size) is None:  # zipfile keeps a cut comment
            raise zipfile.BadZipFile("the comment is cut short")
    except (zipfile.BadZipFile, EOFError, ValueError):
        raise fail("truncated or not an .npz archive (no zip directory at its end)") from None
    return archive


def _declared_entries(archive: zipfile.ZipFile, fail, limit: int) -> Dict[str, tuple]:
    """Each array's declared ``(shape, dtype)`` by key (the marker left out), read from the
    headers; ``fail`` for a name twice, more than ``limit`` bytes unpacked, an entry that is no
    ``.npy`` or an array of a dtype refused."""
    names = archive.namelist()
    twice = sorted(n for n, k in Counter(names).items() if k > 1)
    if twice:
        raise fail(f"entries {twice} appear more than once")
    total = sum(info.file_size for info in archive.infolist())
    if total > limit:
        raise fail(
            f"its arrays would unpack to {total:,} bytes, more than the limit of {limit:,} "
            "(max_bytes= raises it)"
        )
    declared = {}
    for name in names:
        if not name.endswith(".npy"):
            raise fail(f"entry {name!r} is not a NumPy array (.npy)")
        key = name[: -len(".npy")]
        if key != NPZ_MARKER:
            declared[key] = _entry(archive, name, key, fail, _declared)
            problem = dtype_problem(declared[key][1])
            if problem:
                raise fail(f"array {key!r} {problem}")
    return declared


def _read(archive: zipfile.ZipFile, name: str) -> np.ndarray:
    with archive.open(name) as entry:
        return np.lib.format.read_array(entry, allow_pickle=False)


def _entry(archive, name: str, key: str, fail, how):
    """``how(archive, name)``, its errors (a bad CRC, a cut entry, a bad header, pickled
    objects) raised as ``fail`` naming the array."""
    try:
        return how(archive, name)
    except OSError:
        raise
    except Exception as e:
        pickled = "allow_pickle" in str(e)
        why = "holds pickled Python objects" if pickled else f"is damaged ({e})"
        raise fail(f"array {key!r} {why}") from None
