#!/usr/bin/env bash
# The precision and rollout-correction checks on CUDA, with a table (scripts/gpu_check.py); without a CUDA device
# one line and exit 0. Needs only torch and transformers: runs on a lent GPU machine as it is (no setup).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
exec timeout 600 "$PYTHON" scripts/gpu_check.py "$@"
