"""Where a generated report came from: the commit it was made at."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def current_commit() -> str:
    """The short commit id of the checkout this package runs from, ``+dirty`` when files
    differ from it, or ``"unknown"`` outside a git checkout."""

    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode != 0:
            return "unknown"
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty else "")
