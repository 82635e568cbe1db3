"""Where a generated report came from: the package version, and the commit of the code when
it runs from this project's own checkout.

The commit named is the last one that changed the code (:data:`CODE_PATHS`, plus the folders a
report's own scripts live in, such as ``benchmarks``), not ``HEAD``: a commit that only adds
regenerated reports does not change it, so rerunning a report command at the same commit
rewrites the same bytes and leaves git clean.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Tuple, Union

from sim import __version__

ROOT = Path(__file__).resolve().parents[2]
"""The folder holding the ``sim`` package: the checkout's root, or site-packages."""

PROJECT = "nnabla-dls"
CODE_PATHS = ("sim", "updater", "pyproject.toml")
"""What makes the numbers: a commit touching none of these does not change a report."""


def _git(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)


def is_project_checkout() -> bool:
    """Whether the package runs from this project's own git checkout: :data:`ROOT` holds the
    project's ``pyproject.toml`` and is the top of a git work tree (an installed package inside
    a user's repository, e.g. in a ``.venv`` there, is not)."""
    pyproject = ROOT / "pyproject.toml"
    try:
        if f'name = "{PROJECT}"' not in pyproject.read_text():
            return False
        top = _git("rev-parse", "--show-toplevel")
    except (OSError, subprocess.SubprocessError):
        return False
    return top.returncode == 0 and Path(top.stdout.strip()).resolve() == ROOT


def code_commit(output: Union[str, Path, None] = None, also: Tuple[str, ...] = ()) -> str | None:
    """The short id of the last commit that changed :data:`CODE_PATHS` or ``also``, ``+dirty``
    when those differ from it; None outside this project's checkout
    (:func:`is_project_checkout`).

    Args:
        output (str or Path or None, default None): the file or folder being generated; its
            own changes do not count as dirty.
        also (tuple of str, default ()): more paths of the checkout whose code makes the
            report's numbers (``("benchmarks",)`` for a benchmark's report).
    """
    if not is_project_checkout():
        return None
    paths = (*CODE_PATHS, *also)
    spec = ["--", *paths]
    if output is not None and ROOT in Path(output).resolve().parents:  # git refuses paths outside
        spec.append(f":(exclude){Path(output).resolve()}")
    try:
        last = _git("log", "-1", "--format=%h", "--", *paths)
        dirty = _git("status", "--porcelain", "--untracked-files=no", *spec).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    if last.returncode != 0 or not last.stdout.strip():
        return None
    return last.stdout.strip() + ("+dirty" if dirty else "")


def provenance(output: Union[str, Path, None] = None, also: Tuple[str, ...] = ()) -> str:
    """``nnabla-dls 0.1.0, code at commit abc1234``; without the commit outside this project's
    checkout (:func:`code_commit`, which takes ``output`` and ``also``).

    >>> provenance().startswith("nnabla-dls ")
    True
    """
    commit = code_commit(output, also)
    where = f", code at commit {commit}" if commit else ""
    return f"{PROJECT} {__version__}{where}"
