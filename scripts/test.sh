#!/usr/bin/env bash
# Set up .venv if needed, then run the whole test suite (lint, doctests, unit, nnabla, MPI).
# Extra arguments go to pytest, e.g. bash scripts/test.sh -m "not mpi".
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
echo "test.sh: ruff check and ruff format --check" >&2
ruff check .
ruff format --check .
echo "test.sh: pytest (Hypothesis profile ${HYPOTHESIS_PROFILE:-ci})" >&2
HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}" python -m pytest "$@"
