#!/usr/bin/env bash
# Create (or reuse) .venv from Python 3.10 and install the project with its extras.
# Sourced by scripts/report.sh and scripts/test.sh; reinstalls only when pyproject.toml changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${DLS_PYTHON:-python3.10}"
if ! command -v "$py" >/dev/null 2>&1; then
  echo "error: $py not found; nnabla publishes wheels for Python 3.8-3.10 only." >&2
  echo "Install Python 3.10 (pyenv reads .python-version) or set DLS_PYTHON." >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
stamp=".venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[test,mpi,dev]"
  rm -f .venv/.installed-*
  touch "$stamp"
fi
export PATH="$root/.venv/bin:$PATH"
