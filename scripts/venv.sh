#!/usr/bin/env bash
# Create (or reuse) .venv and install the project with its extras; sourced by scripts/report.sh
# and scripts/test.sh (the checkout is this script's folder's parent).
#
# - The interpreter is python3.10, or DLS_PYTHON; its version must be 3.8-3.10 (nnabla publishes
#   wheels for those only). It is checked before anything is created.
# - A .venv whose python is missing, does not run or is of another version is removed and
#   built again (and says so).
# - The project is installed again only when pyproject.toml changed (stamp
#   .venv/.installed-<hash of pyproject.toml>); a failed install leaves no stamp, so the next
#   run retries it.
# Messages go to stderr.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

say() { echo "venv.sh: $*" >&2; }
python_version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }
supported() { case "$1" in 3.8 | 3.9 | 3.10) return 0 ;; *) return 1 ;; esac }

py="${DLS_PYTHON:-python3.10}"
if ! command -v "$py" >/dev/null 2>&1; then
  say "error: $py not found; nnabla publishes wheels for Python 3.8-3.10 only."
  say "Install Python 3.10 (pyenv reads .python-version) or set DLS_PYTHON to a 3.8-3.10 python."
  exit 1
fi
py_version="$(python_version "$py" || true)"
if [ -z "$py_version" ]; then
  why="$("$py" -c 'import sys' 2>&1 | head -n 1 || true)"
  say "error: $py does not run (${why:-it printed no version}); set DLS_PYTHON to a working 3.8-3.10 python."
  exit 1
fi
if ! supported "$py_version"; then
  say "error: $py is Python $py_version; nnabla publishes wheels for Python 3.8-3.10 only."
  say "Install Python 3.10 (pyenv reads .python-version) or set DLS_PYTHON to a 3.8-3.10 python."
  say "Nothing was created."
  exit 1
fi

if [ -e .venv ] || [ -L .venv ]; then
  problem=""
  if [ ! -e .venv/bin/python ]; then
    problem="has no working bin/python (missing, or a link to a python that is gone)"
  else
    venv_version="$(python_version .venv/bin/python || true)"
    if [ -z "$venv_version" ]; then
      problem="has a bin/python that does not run"
    elif ! supported "$venv_version"; then
      problem="is Python $venv_version, not 3.8-3.10"
    fi
  fi
  if [ -n "$problem" ]; then
    say ".venv $problem: rebuilding it with $py (Python $py_version)"
    rm -rf "$root/.venv"
  fi
fi
if [ ! -d .venv ]; then
  say "creating .venv with $py (Python $py_version)"
  "$py" -m venv .venv
fi

stamp=".venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  if compgen -G ".venv/.installed-*" >/dev/null; then
    say "pyproject.toml changed: reinstalling nnabla-dls and its extras into .venv"
  else
    say "installing nnabla-dls and its extras (test, mpi, dev, docs) into .venv (first run: about a minute)"
  fi
  if ! .venv/bin/python -m pip install --quiet --upgrade pip ||
    ! .venv/bin/python -m pip install --quiet -e ".[test,mpi,dev,docs]"; then
    say "error: the install into .venv failed (pip's messages above); the next run retries it."
    exit 1
  fi
  rm -f .venv/.installed-*
  touch "$stamp"
  say "installed"
fi
export PATH="$root/.venv/bin:$PATH"
