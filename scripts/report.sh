#!/usr/bin/env bash
# Set up .venv if needed, then regenerate reports/ (figures and tables) with fixed seeds.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
dls report --out reports "$@"
