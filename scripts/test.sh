#!/usr/bin/env bash
# Set up .venv if needed, then run the whole test suite (lint, doctests, unit, nnabla, MPI).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
ruff check .
ruff format --check .
HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}" python -m pytest "$@"
