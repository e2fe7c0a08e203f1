#!/usr/bin/env bash
# The GPU check (scripts/gpu_check.py) under a hard 9-minute stop; its own budget is 8 minutes.
#   scripts/gpu_check.sh OUT_DIR [--dry] [--budget-s SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}"
exec timeout 540 "$PY" scripts/gpu_check.py "$@"
