#!/usr/bin/env bash
# Set up .venv if needed, then regenerate reports/ with fixed seeds: the policy simulations
# (dls report: figures + reports/README.md) and the digits training comparison (dls train:
# reports/train.md + reports/train_scale_trajectory.png). Extra arguments go to dls report.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
dls report --out reports "$@"
dls train --steps 600 --out reports
