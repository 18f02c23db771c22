"""The environment the vLLM engine's spawned processes start with (rlvr.backends.vllm_engine.engine_env)."""

from __future__ import annotations

from rlvr.backends.vllm_engine import engine_env


import pytest


@pytest.fixture(autouse=True)
def unset(monkeypatch):
    for key in ("TORCH_COMPILE_DISABLE", "VLLM_ENABLE_V1_MULTIPROCESSING"):
        monkeypatch.delenv(key, raising=False)


def test_an_eager_engine_compiles_nothing():
    env = engine_env("/tmp/ipc", omp_threads=2, eager=True, one_worker=False)
    assert env == {"VLLM_RPC_BASE_PATH": "/tmp/ipc", "OMP_NUM_THREADS": "2", "TORCH_COMPILE_DISABLE": "1"}


def test_a_compiled_engine_keeps_torch_compile():
    assert engine_env("/tmp/ipc", omp_threads=None, eager=False, one_worker=False) == {"VLLM_RPC_BASE_PATH": "/tmp/ipc"}


def test_one_worker_runs_in_the_engine_core_process():
    assert engine_env("/tmp/ipc", omp_threads=None, eager=False)["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


def test_a_users_own_setting_wins(monkeypatch):
    monkeypatch.setenv("TORCH_COMPILE_DISABLE", "0")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    env = engine_env("/tmp/ipc", omp_threads=None, eager=True)
    assert env["TORCH_COMPILE_DISABLE"] == "0" and env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"
