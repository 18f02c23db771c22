"""The judge server's vLLM backend (what `judge_server.prefer_vllm: true` starts when vLLM is installed) with the
default model: OpenAI client round trips, the judge worker end to end, and stop() ending vLLM's processes.
Skipped only where vLLM is not installed (scripts/setup.sh installs it)."""

from __future__ import annotations

import json
import os
import socket
import urllib.request
from pathlib import Path

import openai
import pytest

from rlvr.backends.vllm_engine import vllm_available
from rlvr.judge_server import start_judge_server
from tests.helpers.judging import judge_capital_answers

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not importable (scripts/setup.sh installs it)")]

TIMEOUT_S = 180


@pytest.fixture(scope="module")
def inductor_cache(tmp_path_factory) -> Path:
    """The server's inductor cache, its own: whatever torch compiles in the server lands here."""
    return tmp_path_factory.mktemp("inductor")


@pytest.fixture(scope="module")
def judge(default_model_dir, inductor_cache):
    # fallback_to_transformers=False: a vLLM start-up failure fails the test instead of hiding behind the fallback
    handle = start_judge_server(default_model_dir, prefer_vllm=True, fallback_to_transformers=False,
                                startup_timeout_s=600, server_args=["--threads", "1"],
                                env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache)})
    yield handle
    handle.stop()


def test_serves_the_model_under_the_judge_name(judge):
    assert judge.backend == "vllm" and judge.url.endswith("/v1") and judge.alive()
    with urllib.request.urlopen(f"{judge.url}/models", timeout=30) as response:
        assert [m["id"] for m in json.loads(response.read())["data"]] == ["judge"]


def test_greedy_answer_is_sensible_and_deterministic(judge):
    """float32 on CPU: with vLLM's default (the checkpoint's bfloat16) this answer was "L'Étoile, la Mar"."""
    client = openai.OpenAI(base_url=judge.url, api_key="EMPTY", max_retries=0, timeout=TIMEOUT_S)
    replies = [client.chat.completions.create(
        model="judge", messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=8, temperature=0).choices[0] for _ in range(2)]
    assert "Paris" in replies[0].message.content
    assert replies[0].message.content == replies[1].message.content


def test_judge_worker_against_the_vllm_server(judge):
    answers = ["The capital of France is Paris.", "It is Berlin.", "Paris.", "Lyon, I think."]
    results, worker = judge_capital_answers(judge.url, answers, TIMEOUT_S)
    assert all(r.status in ("ok", "invalid") for r in results), [r.info for r in results]
    assert worker.metrics()["judge/requests"] == 4


def test_logprobs_compile_nothing(judge, inductor_cache):
    """The eager server runs with TORCH_COMPILE_DISABLE: vLLM's sampler otherwise compiles its logprob-rank count
    with inductor at the first request that asks for logprobs (15 s of a fresh machine's first judge call)."""
    client = openai.OpenAI(base_url=judge.url, api_key="EMPTY", max_retries=0, timeout=TIMEOUT_S)
    choice = client.chat.completions.create(
        model="judge", messages=[{"role": "user", "content": "Is Paris the capital of France? Yes or no."}],
        max_tokens=1, temperature=0, logprobs=True, top_logprobs=5).choices[0]
    assert len(choice.logprobs.content[0].top_logprobs) == 5
    assert not [p for p in inductor_cache.rglob("*") if p.is_file()], "the server compiled a kernel"
    # the cache looked at is the server's: its temp dir moved (tmpdir_env), the cache dir it was given did not
    environ = Path(f"/proc/{judge.process.pid}/environ").read_bytes().split(b"\0")
    assert f"TORCHINDUCTOR_CACHE_DIR={inductor_cache}".encode() in environ


def test_stop_ends_the_server(judge):
    port = judge.port
    sockets = Path(judge._sockets)
    assert list(sockets.iterdir()), "vLLM's socket files should be in the server's own directory"
    # ... and, as its temp dir, its engine's torch FileStore, which a killed server left in /tmp
    assert list(sockets.glob("vllm_dist_*")), sorted(p.name for p in sockets.iterdir())
    judge.stop()
    assert not judge.alive()
    assert not sockets.exists()  # vLLM never removes them itself (they piled up in /tmp)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
