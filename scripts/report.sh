#!/usr/bin/env bash
# Set up .venv if needed, then regenerate reports/ with fixed seeds: the policy simulations
# (dls report: figures + reports/README.md) and the digits training comparison (dls train:
# reports/train.md + reports/train_scale_trajectory.png). Extra arguments go to dls report.
# Both commands report their stages on stderr (bars on a terminal, status lines otherwise).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
echo "report.sh: dls report --out reports (about a minute on two cores)" >&2
dls report --out reports "$@"
echo "report.sh: dls train --steps 600 --out reports (about a minute on two cores)" >&2
dls train --steps 600 --out reports
