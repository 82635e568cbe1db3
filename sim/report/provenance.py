"""Where a generated report came from: the commit it was made at."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Union

ROOT = Path(__file__).resolve().parents[2]


def current_commit(output: Union[str, Path, None] = None) -> str:
    """The short commit id of the checkout this package runs from, ``+dirty`` when tracked
    files differ from it, or ``"unknown"`` outside a git checkout.

    Args:
        output (str or Path or None, default None): the file or folder being generated; its
            own changes do not count as dirty (a report rewrites its figures before its text).
    """

    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)

    spec = ["--", "."]
    if output is not None:
        spec.append(f":(exclude){Path(output).resolve()}")
    try:
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode != 0:
            return "unknown"
        dirty = git("status", "--porcelain", "--untracked-files=no", *spec).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty else "")
