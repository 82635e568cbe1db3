"""How a file this package wrote says so in its own content, and the bounded read that tells
(:func:`written_by_dls`), so a copy, a move, ``rsync`` or ``scp`` keep a file's identity.

- **.npz archives** (checkpoints, traces, measured runs): their first member is
  ``written_by_dls.npy`` (:data:`NPZ_MARKER`), read from the zip's first local header (the
  first 64 bytes of the file).
- **PNG figures**: a ``tEXt`` chunk ``written-by`` = ``nnabla-dls`` before the image data;
  **PDF and SVG figures**: the keywords ``written by nnabla-dls`` in their metadata (found in the
  first or last 64 KiB).
- **Text** (markdown, CSV): a marker holding the SHA-256 of the rest of the text, so a file a
  user edited after the package wrote it no longer counts as the package's: markdown (and any
  other text) ends with the line ``<!-- written by nnabla-dls; sha256 <hex> -->``; a CSV's
  header line ends with the cell ``written by nnabla-dls; sha256 <hex>`` (a column of its own,
  empty in every row), the hash taken over the file without that cell.

Files written by earlier versions carry no marker: they count as the package's while the
folder's manifest ``.dls-written.json`` (which those versions kept, and this one never writes)
lists them with their current SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import struct
from pathlib import Path

NPZ_MARKER = "written_by_dls"
"""The name of the first member (``<name>.npy``) of every .npz archive this package writes."""
MARK = "nnabla-dls"
FIGURE_KEYWORDS = f"written by {MARK}"
"""The keywords of every PDF and SVG figure this package writes."""
PNG_KEY = "written-by"
LEGACY_MANIFEST = ".dls-written.json"
"""The per-folder list of earlier versions, read (never written) for their files."""

_TEXT_MAX = 64 * 2**20  # a text file larger than this is nobody's report: not read
_MANIFEST_MAX = 4 * 2**20
_EDGE = 64 * 2**10
_MD_MARK = re.compile(rb"<!-- written by nnabla-dls; sha256 ([0-9a-f]{64}) -->\n\Z")
_CSV_MARK = re.compile(rb",written by nnabla-dls; sha256 ([0-9a-f]{64})(?=\r?\n)")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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


def _text_is_marked(data: bytes) -> bool:
    """Whether ``data`` ends with its markdown marker, or its first line with its CSV marker,
    holding the SHA-256 of the rest."""
    found = _MD_MARK.search(data)
    if found and (found.start() == 0 or data[found.start() - 1 : found.start()] == b"\n"):
        return found.group(1).decode() == _sha256(data[: found.start()])
    head_end = data.find(b"\n")
    found = _CSV_MARK.search(data, 0, head_end + 1) if head_end > 0 else None
    if found and data[found.end() : head_end + 1].strip() == b"":
        return found.group(1).decode() == _sha256(data[: found.start()] + data[found.end() :])
    return False


def _png_is_marked(f) -> bool:
    f.seek(8)
    while True:
        head = f.read(8)
        if len(head) < 8:
            return False
        size, kind = struct.unpack(">I4s", head)
        if kind in (b"IDAT", b"IEND") or size > _EDGE:
            return False
        body = f.read(size)
        f.seek(4, os.SEEK_CUR)  # the CRC
        if kind == b"tEXt" and body == f"{PNG_KEY}\0{MARK}".encode():
            return True


def _content_is_marked(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            return False
        head = f.read(64)
        if head.startswith(b"PK\x03\x04") and len(head) >= 30:
            length = struct.unpack("<H", head[26:28])[0]
            return head[30 : 30 + length] == f"{NPZ_MARKER}.npy".encode()
        if head.startswith(b"\x89PNG\r\n\x1a\n"):
            return _png_is_marked(f)
        if head.startswith(b"%PDF") or head.lstrip().startswith(b"<?xml"):
            f.seek(0)
            edges = f.read(_EDGE)
            f.seek(max(0, info.st_size - _EDGE))
            edges += f.read(_EDGE)
            return FIGURE_KEYWORDS.encode() in edges
        if info.st_size > _TEXT_MAX:
            return False
        f.seek(0)
        return _text_is_marked(f.read())


def _listed_by_legacy_manifest(path: Path) -> bool:
    manifest = path.parent / LEGACY_MANIFEST
    try:
        fd = os.open(manifest, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MANIFEST_MAX:
            return False
        try:
            recorded = json.loads(f.read())["files"][path.name]
        except (ValueError, KeyError, TypeError, RecursionError):
            return False
    if not isinstance(recorded, str) or path.stat().st_size > _TEXT_MAX * 16:
        return False
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest() == recorded


def written_by_dls(path: Path) -> bool:
    """Whether the regular file ``path`` says by its content that this package wrote it (and,
    for text, that nobody edited it since), or an earlier version's manifest lists it
    unchanged. Reads at most its first and last 64 KiB, except text up to 64 MiB (hashed)."""
    try:
        return _content_is_marked(path) or _listed_by_legacy_manifest(path)
    except OSError:
        return False
