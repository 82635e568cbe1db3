"""How a file this package wrote proves it in its own content, and of which kind it is
(:func:`kind_of`): a digest over the file's own bytes, stored in the file, that an edit, an
annotation or a copy made by re-saving the content breaks. A copy, a move, ``rsync`` or ``scp``
keep the bytes, and so the proof.

- **.npz archives** (kinds ``checkpoint``, ``trace``, ``measured run``): the zip comment
  ``written by nnabla-dls; <kind>; sha256 <hex>``, the SHA-256 of the kind and of each member
  in the archive's order: its name, CRC-32, sizes, compression and offset (the archive's
  layout); every member's data must match its CRC-32. ``np.savez(..., **dict(np.load(ours)))``
  writes the same arrays without the comment: such a copy is the user's.
- **PNG figures**: a ``tEXt`` chunk ``written-by`` = ``nnabla-dls; png sha256 <hex>``, the
  SHA-256 of the file without that chunk (a redraw, even keeping the text chunks, breaks it).
- **PDF and SVG figures**: the metadata keywords ``written by nnabla-dls; <pdf|svg> sha256
  <hex>``, the SHA-256 of the file with ``<hex>`` written as 64 zeros (an edit, or the bytes a
  PDF viewer appends for an annotation, break it).
- **Text** (kinds ``markdown``, ``csv``): markdown (and any other text) ends with the line
  ``<!-- written by nnabla-dls; sha256 <hex> -->``; a CSV's header line ends with the cell
  ``written by nnabla-dls; sha256 <hex>`` (a column of its own, empty in every row); ``<hex>``
  is the SHA-256 of the file without that line or cell.

Figures and text larger than 64 MiB are never read (not the package's). Files written by
earlier versions keep loading; only their markdown and CSV files (whose marker already held
the SHA-256 of the text) count as the package's for replacing.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
import stat
import struct
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO, Iterable

NPZ_MARKER = "written_by_dls"
"""The name of the first member (``<name>.npy``) of every .npz archive this package writes;
loaders leave it out. Not a proof: a copy made with NumPy keeps it."""
MARK = "nnabla-dls"
PNG_KEY = "written-by"

KINDS = {
    "checkpoint": "a checkpoint",
    "trace": "a gradient trace",
    "measured run": "a measured run",
    "markdown": "a markdown file",
    "csv": "a CSV file",
    "png": "a PNG figure",
    "pdf": "a PDF figure",
    "svg": "an SVG figure",
}
"""Every kind of file whose content can prove that this package wrote it, and its label."""
NPZ_KINDS = ("checkpoint", "trace", "measured run")
"""The kinds written as ``.npz`` archives (:func:`updater.common.npz.write_npz`)."""

_PROOF_MAX = 64 * 2**20  # a figure or text larger than this is nobody's report: not read
_ZEROS = "0" * 64
_NPZ_PROOF = re.compile(
    f"written by {MARK}; ({'|'.join(NPZ_KINDS)}); sha256 ([0-9a-f]{{64}})".encode()
)
_DOC_PROOF = re.compile(rb"written by nnabla-dls; (pdf|svg) sha256 ([0-9a-f]{64})")
_PNG_PROOF = re.compile(rb"written-by\0nnabla-dls; png sha256 ([0-9a-f]{64})")
_MD_MARK = re.compile(rb"<!-- written by nnabla-dls; sha256 ([0-9a-f]{64}) -->\n\Z")
_CSV_MARK = re.compile(rb",written by nnabla-dls; sha256 ([0-9a-f]{64})(?=\r?\n)")
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def kind_label(kind: str) -> str:
    """``a checkpoint``, ``a PNG figure``...; ``a .<kind> file`` for a kind that cannot prove
    itself (``jpg``, ``h5``)."""
    return KINDS.get(kind, f"a .{kind} file")


def kind_by_suffix(path: Path) -> str:
    """The kind of a report's file by its name: ``markdown`` for ``.md``, ``csv`` for
    ``.csv``, else the suffix in lower case without the dot (a figure's format).

    >>> kind_by_suffix(Path("README.md")), kind_by_suffix(Path("traj.PNG"))
    ('markdown', 'png')
    """
    suffix = Path(path).suffix[1:].lower()
    return {"md": "markdown"}.get(suffix, suffix)


# ---------------------------------------------------------------- text


def mark_text(text: str, csv: bool = False) -> bytes:
    """``text`` (UTF-8, ending with a newline; a character UTF-8 cannot hold, such as a name's
    undecodable byte, becomes ``?``) with its marker: a last line (markdown and any text), or
    with ``csv`` a last cell on the first line."""
    data = text.encode("utf-8", "replace")
    if not data.endswith(b"\n"):
        data += b"\n"
    if not csv:
        return data + f"<!-- written by {MARK}; sha256 {_sha256(data)} -->\n".encode()
    head, newline, rest = data.partition(b"\n")
    return head + f",written by {MARK}; sha256 {_sha256(data)}".encode() + newline + rest


def _text_kind(data: bytes) -> str | None:
    """``markdown`` when ``data`` ends with its marker line, ``csv`` when its first line ends
    with its marker cell, holding the SHA-256 of the rest; else None."""
    found = _MD_MARK.search(data)
    if found and (found.start() == 0 or data[found.start() - 1 : found.start()] == b"\n"):
        return "markdown" if found.group(1).decode() == _sha256(data[: found.start()]) else None
    head_end = data.find(b"\n")
    found = _CSV_MARK.search(data, 0, head_end + 1) if head_end > 0 else None
    if found and data[found.end() : head_end + 1].strip() == b"":
        rest = data[: found.start()] + data[found.end() :]
        return "csv" if found.group(1).decode() == _sha256(rest) else None
    return None


# ---------------------------------------------------------------- .npz archives


def _layout_digest(kind: str, members: Iterable[zipfile.ZipInfo]) -> str:
    digest = hashlib.sha256(f"{MARK} npz 1\n{kind}\n".encode())
    for m in members:
        line = f"{m.filename}\t{m.CRC:08x}\t{m.file_size}\t{m.compress_size}\t{m.compress_type}"
        digest.update(f"{line}\t{m.header_offset}\n".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def npz_proof(kind: str, archive: zipfile.ZipFile) -> bytes:
    """The zip comment proving that this package wrote ``archive`` (open for writing, every
    member written) as a ``kind`` (one of ``checkpoint``, ``trace``, ``measured run``)."""
    if kind not in NPZ_KINDS:
        raise ValueError(f"kind must be one of {NPZ_KINDS}, got {kind!r}")
    return f"written by {MARK}; {kind}; sha256 {_layout_digest(kind, archive.infolist())}".encode()


def zip_comment(f: BinaryIO, size: int) -> bytes | None:
    """The comment of the zip archive ``f`` of ``size`` bytes (read from its last 64 KiB), or
    None when it has no end record or a comment cut short (a truncated file)."""
    tail = min(size, 22 + 0xFFFF)
    f.seek(size - tail)
    data = f.read(tail)
    at = data.rfind(b"PK\x05\x06")
    if at < 0 or len(data) - at < 22:
        return None
    comment = data[at + 22 :]
    return comment if len(comment) == struct.unpack("<H", data[at + 20 : at + 22])[0] else None


def _npz_kind(f: BinaryIO, size: int) -> str | None:
    found = _NPZ_PROOF.fullmatch(zip_comment(f, size) or b"")
    if not found:
        return None  # a user's zip or NumPy's own .npz: decided without reading further
    kind = found.group(1).decode()
    try:
        with zipfile.ZipFile(f) as archive:
            if _layout_digest(kind, archive.infolist()).encode() != found.group(2):
                return None
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                with memoryview(data) as view:  # no copy: the CRC-32 reads the mapping
                    if not all(_crc_holds(view, archive, m) for m in archive.infolist()):
                        return None
    except (zipfile.BadZipFile, EOFError, ValueError, NotImplementedError, zlib.error):
        return None
    return kind


def _crc_holds(view: memoryview, archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> bool:
    """Whether ``member``'s data matches its CRC-32: a stored member read from the mapped
    file ``view`` (zipfile's reader is several times slower), others through zipfile."""
    if member.compress_type != zipfile.ZIP_STORED:
        with archive.open(member) as entry:  # raises BadZipFile on a CRC mismatch
            while entry.read(1 << 22):
                pass
        return True
    at = member.header_offset
    head = bytes(view[at : at + 30])
    if len(head) < 30 or head[:4] != b"PK\x03\x04":
        return False
    start = at + 30 + sum(struct.unpack("<HH", head[26:30]))
    if start + member.compress_size > len(view):
        return False
    with view[start : start + member.compress_size] as data:
        return zlib.crc32(data) == member.CRC


# ---------------------------------------------------------------- figures


def figure_keywords(fmt: str) -> str:
    """The keywords a ``pdf`` or ``svg`` figure is written with: its proof, the digest still
    zeros (:func:`prove_figure` fills it in)."""
    return f"written by {MARK}; {fmt} sha256 {_ZEROS}"


def _png_chunks(data: bytes):
    """``(start, end, type, body)`` of each chunk of the PNG ``data`` up to IEND; ValueError
    when the chunks do not end with IEND inside the data."""
    at = len(_PNG_MAGIC)
    while at + 12 <= len(data):
        size, kind = struct.unpack(">I4s", data[at : at + 8])
        end = at + 12 + size
        if end > len(data):
            break
        yield at, end, kind, data[at + 8 : at + 8 + size]
        if kind == b"IEND":
            return
        at = end
    raise ValueError("no IEND chunk")


def prove_figure(data: bytes, fmt: str) -> bytes:
    """The figure ``data`` (as matplotlib wrote it: a PDF or SVG with
    :func:`figure_keywords`) with its proof; other formats are returned as they are."""
    if fmt == "png":
        text = f"{PNG_KEY}\0{MARK}; png sha256 {_sha256(data)}".encode()
        chunk = struct.pack(">I4s", len(text), b"tEXt") + text
        chunk += struct.pack(">I", zlib.crc32(chunk[4:]))
        ihdr_end = next(_png_chunks(data))[1]
        return data[:ihdr_end] + chunk + data[ihdr_end:]
    if fmt in ("pdf", "svg"):
        blank = figure_keywords(fmt).encode()
        if data.count(blank) != 1:
            raise ValueError(f"the {fmt} figure must hold its keywords once")
        return data.replace(blank, blank[:-64] + _sha256(data).encode())
    return data


def _png_proven(data: bytes) -> bool:
    try:
        proofs = [
            (a, b, _PNG_PROOF.fullmatch(body))
            for a, b, t, body in _png_chunks(data)
            if t == b"tEXt"
        ]
    except ValueError:
        return False
    proven = [(a, b, found) for a, b, found in proofs if found is not None]
    if len(proven) != 1:
        return False
    start, end, found = proven[0]
    return found.group(1).decode() == _sha256(data[:start] + data[end:])


def _document_proven(data: bytes, fmt: str) -> bool:
    found = list(_DOC_PROOF.finditer(data))
    if len(found) != 1 or found[0].group(1).decode() != fmt:
        return False
    start, end = found[0].span(2)
    return found[0].group(2).decode() == _sha256(data[:start] + _ZEROS.encode() + data[end:])


# ---------------------------------------------------------------- reading a file's proof


def kind_of(path: Path) -> str | None:
    """The kind (a key of :data:`KINDS`) of the regular file ``path`` when its content proves
    that this package wrote it and nobody changed it since; else None (also when it cannot be
    read). Reads an archive's last 64 KiB, and all of it only when that holds its proof;
    figures and text up to 64 MiB."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        with os.fdopen(os.open(path, flags), "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                return None
            if f.read(4) == b"PK\x03\x04":
                return _npz_kind(f, info.st_size)
            if info.st_size > _PROOF_MAX:
                return None
            f.seek(0)
            data = f.read()
    except OSError:
        return None
    if data.startswith(_PNG_MAGIC):
        return "png" if _png_proven(data) else None
    fmt = "pdf" if data.startswith(b"%PDF") else "svg" if data.lstrip().startswith(b"<") else ""
    if fmt and _document_proven(data, fmt):
        return fmt
    return _text_kind(data)


def written_by_dls(path: Path) -> bool:
    """Whether the content of the regular file ``path`` proves that this package wrote it, of
    any kind (:func:`kind_of`)."""
    return kind_of(path) is not None
