"""What ``dls`` says when Ctrl-C stops a command: one line naming the files it wrote before
(each write is atomic: a file is whole or not there), exit status 130, no traceback."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Tuple

OUTPUTS = ("out", "plot", "csv")
"""The options of the subcommands that name their outputs: a folder (``--out``) or a file."""

INTERRUPTED = 130
"""The exit status of a command Ctrl-C stopped (128 + SIGINT, as a shell reports it)."""

Seen = Dict[Path, Tuple[int, int]]


def outputs_now(args) -> Seen:
    """Each file the command ``args`` may write, as it is now: ``(inode, mtime in ns)`` by
    path (every file of a ``--out`` folder; the ``--plot`` or ``--csv`` file)."""
    found: Seen = {}
    for option in OUTPUTS:
        given = getattr(args, option, None)
        if not given:
            continue
        path = Path(given)
        files = [e.path for e in os.scandir(path)] if path.is_dir() else [path]
        for name in files:
            try:
                info = os.stat(name)
            except OSError:
                continue
            found[Path(name)] = (info.st_ino, info.st_mtime_ns)
    return found


def written_since(before: Seen, args) -> List[Path]:
    """The outputs of ``args`` written (new or replaced) since ``before``
    (:func:`outputs_now`), in name order."""
    now = outputs_now(args)
    return sorted(p for p, seen in now.items() if before.get(p) != seen)


def interrupted_line(command: str, written: List[Path]) -> str:
    """The one line a stopped command prints.

    >>> interrupted_line("report", [Path("r/a.png"), Path("r/b.png")])
    'dls report: interrupted (Ctrl-C); wrote 2 files before: r/a.png, r/b.png'
    >>> interrupted_line("sweep", [])
    'dls sweep: interrupted (Ctrl-C); nothing written'
    """
    if not written:
        return f"dls {command}: interrupted (Ctrl-C); nothing written"
    files = "file" if len(written) == 1 else "files"
    names = ", ".join(str(p) for p in written)
    return f"dls {command}: interrupted (Ctrl-C); wrote {len(written)} {files} before: {names}"
