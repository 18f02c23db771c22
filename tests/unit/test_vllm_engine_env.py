"""The environment the vLLM engine's spawned processes start with (rlvr.backends.vllm_engine.engine_env)."""

from __future__ import annotations

import pytest

from rlvr.backends.vllm_engine import engine_env
from rlvr.lifecycle.run_tmpdir import tmpdir_env

IPC = {"VLLM_RPC_BASE_PATH": "/tmp/ipc", **tmpdir_env("/tmp/ipc")}  # its sockets and its temp files: one directory


@pytest.fixture(autouse=True)
def unset(monkeypatch):
    for key in ("TORCH_COMPILE_DISABLE", "VLLM_ENABLE_V1_MULTIPROCESSING"):
        monkeypatch.delenv(key, raising=False)


def test_an_eager_engine_compiles_nothing():
    env = engine_env("/tmp/ipc", omp_threads=2, eager=True, one_worker=False)
    assert env == {**IPC, "OMP_NUM_THREADS": "2", "TORCH_COMPILE_DISABLE": "1"}


def test_a_compiled_engine_keeps_torch_compile():
    assert engine_env("/tmp/ipc", omp_threads=None, eager=False, one_worker=False) == IPC


def test_one_worker_runs_in_the_engine_core_process():
    assert engine_env("/tmp/ipc", omp_threads=None, eager=False)["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


def test_a_users_own_setting_wins(monkeypatch):
    monkeypatch.setenv("TORCH_COMPILE_DISABLE", "0")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    env = engine_env("/tmp/ipc", omp_threads=None, eager=True)
    assert env["TORCH_COMPILE_DISABLE"] == "0" and env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"


def test_the_engines_temp_files_go_with_its_ipc_dir():
    """vLLM's FileStore rendezvous file (`vllm_dist_*`) stayed in /tmp after every engine, killed with its actor."""
    assert engine_env("/tmp/ipc", omp_threads=None, eager=True)["TMPDIR"] == "/tmp/ipc"
