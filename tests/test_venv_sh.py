"""scripts/venv.sh (issues 10, 12): the supported Python only, one install, again only when
pyproject.toml changes, a venv of the wrong or a broken Python rebuilt."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.paths import ROOT

REPO = ROOT


# ---------------------------------------------------------------- scripts/venv.sh (issue 10, 12)

FAKE_PYTHON = """#!/usr/bin/env bash
# A stand-in interpreter: reports version VERSION, makes venvs holding a copy of itself and
# logs pip commands to $FAKE_LOG instead of installing anything.
case "$1" in
  -c) echo "VERSION" ;;
  -m)
    if [ "$2" = venv ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; fi
    if [ "$2" = pip ]; then shift 2; echo "pip $*" >> "$FAKE_LOG"; fi ;;
esac
"""


def _fake_python(path: Path, version: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(FAKE_PYTHON.replace("VERSION", version))
    path.chmod(0o755)
    return path


@pytest.fixture
def checkout(tmp_path):
    """A temporary checkout: a copy of scripts/venv.sh (its folder's parent is the root it
    works in) and a pyproject.toml; the real .venv is never touched."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "venv.sh", root / "scripts" / "venv.sh")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    return root


def _venv_sh(root: Path, python: Path):
    env = {**os.environ, "DLS_PYTHON": str(python), "FAKE_LOG": str(root / "pip.log")}
    return subprocess.run(
        ["bash", "-c", 'source scripts/venv.sh && echo "ok: $(command -v python)"'],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_venv_sh_refuses_an_unsupported_python_and_creates_nothing(checkout, tmp_path):
    done = _venv_sh(checkout, _fake_python(tmp_path / "bin" / "python3.12", "3.12"))
    assert done.returncode != 0
    assert "is Python 3.12" in done.stderr and "3.8-3.10" in done.stderr
    assert not (checkout / ".venv").exists() and not (checkout / "pip.log").exists()


def test_venv_sh_installs_once_and_again_only_when_pyproject_changes(checkout, tmp_path):
    python = _fake_python(tmp_path / "bin" / "python3.10", "3.10")
    log = checkout / "pip.log"
    first = _venv_sh(checkout, python)
    assert first.returncode == 0, first.stderr
    assert "creating .venv" in first.stderr
    assert "installing nnabla-dls and its extras" in first.stderr
    assert f"ok: {checkout}/.venv/bin/python" in first.stdout
    assert "install --quiet -e .[test,mpi,dev,docs]" in log.read_text()
    calls = log.read_text()
    again = _venv_sh(checkout, python)
    assert again.returncode == 0 and log.read_text() == calls  # stamp: nothing reinstalled
    (checkout / "pyproject.toml").write_text("[project]\nname = 'y'\n")
    changed = _venv_sh(checkout, python)
    assert changed.returncode == 0 and "pyproject.toml changed" in changed.stderr
    assert log.read_text().count("-e .[test,mpi,dev,docs]") == 2


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda py: _fake_python(py, "3.12"), "is Python 3.12"),
        (lambda py: py.unlink(), "has no working bin/python"),
        (lambda py: py.write_text("#!/bin/sh\nexit 3\n"), "does not run"),
    ],
)
def test_venv_sh_rebuilds_a_venv_of_the_wrong_or_a_broken_python(
    damage, message, checkout, tmp_path
):
    python = _fake_python(tmp_path / "bin" / "python3.10", "3.10")
    assert _venv_sh(checkout, python).returncode == 0
    damage(checkout / ".venv" / "bin" / "python")
    done = _venv_sh(checkout, python)
    assert done.returncode == 0, done.stderr
    assert message in done.stderr and "rebuilding" in done.stderr
    version = subprocess.run(
        [str(checkout / ".venv" / "bin" / "python"), "-c", "v"], capture_output=True, text=True
    )
    assert version.stdout.strip() == "3.10"
    assert (checkout / "pip.log").read_text().count("-e .[test,mpi,dev,docs]") == 2
