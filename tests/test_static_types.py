"""mypy over the whole package (issue 51), with the settings of ``pyproject.toml``: it reports
no error."""

import os
import re
import subprocess
import sys

import pytest

from tests.paths import ROOT


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory) -> dict:
    """Each module's errors (``line: message``) that ``mypy -p updater`` reports on this
    checkout, with a cache of its own; fails unless every error it counts was read."""
    cache = tmp_path_factory.mktemp("mypy") / "cache"
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "-p", "updater", "--cache-dir", str(cache)],
        cwd=ROOT,
        env={**os.environ, "MYPYPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 1: errors found
    found: dict = {}
    for path, line, message in re.findall(r"^(\S+\.py):(\d+): error: (.*)$", done.stdout, re.M):
        found.setdefault(path, []).append(f"{line}: {message}")
    counted = re.search(r"^Found (\d+) errors? in|^(Success): no issues found", done.stdout, re.M)
    assert counted, done.stdout[-3000:]
    assert sum(map(len, found.values())) == int(counted.group(1) or 0), done.stdout[-3000:]
    return found


def test_mypy_finds_no_error_in_the_package(mypy_errors):
    assert mypy_errors == {}
