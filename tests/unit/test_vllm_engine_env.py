"""The environment the vLLM engine's spawned processes start with (rlvr.backends.vllm_engine.engine_env)."""

from __future__ import annotations

from rlvr.backends.vllm_engine import engine_env


def test_an_eager_engine_compiles_nothing(monkeypatch):
    monkeypatch.delenv("TORCH_COMPILE_DISABLE", raising=False)
    env = engine_env("/tmp/ipc", omp_threads=2, eager=True)
    assert env == {"VLLM_RPC_BASE_PATH": "/tmp/ipc", "OMP_NUM_THREADS": "2", "TORCH_COMPILE_DISABLE": "1"}


def test_a_compiled_engine_keeps_torch_compile(monkeypatch):
    monkeypatch.delenv("TORCH_COMPILE_DISABLE", raising=False)
    assert engine_env("/tmp/ipc", omp_threads=None, eager=False) == {"VLLM_RPC_BASE_PATH": "/tmp/ipc"}


def test_a_users_own_setting_wins(monkeypatch):
    monkeypatch.setenv("TORCH_COMPILE_DISABLE", "0")
    assert engine_env("/tmp/ipc", omp_threads=None, eager=True)["TORCH_COMPILE_DISABLE"] == "0"
