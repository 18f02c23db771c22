"""The real transformers judge server with the default model: OpenAI client round trips, batching, the judge
worker end to end, start-up failures, and stop() closing the port."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request

import openai
import pytest

from rlvr.judge_server import JudgeServerError, start_judge_server
from tests.helpers.judging import judge_capital_answers

pytestmark = pytest.mark.slow

# The CPU may be shared and busy: generous per-request deadlines, short completions.
TIMEOUT_S = 180


@pytest.fixture(scope="module")
def judge(default_model_dir):
    handle = start_judge_server(default_model_dir, prefer_vllm=False, startup_timeout_s=300,
                                server_args=["--threads", "1"])
    yield handle
    handle.stop()


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, json.loads(response.read())


def test_health_and_models(judge):
    assert judge.backend == "transformers" and judge.url.endswith("/v1") and judge.alive()
    assert get_json(f"{judge.root_url}/health") == (200, {"status": "ok"})
    status, models = get_json(f"{judge.url}/models")
    assert status == 200 and [m["id"] for m in models["data"]] == ["judge"]


def test_openai_client_gets_a_completion(judge):
    client = openai.OpenAI(base_url=judge.url, api_key="EMPTY", max_retries=0, timeout=TIMEOUT_S)
    completion = client.chat.completions.create(
        model="judge", messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=8, temperature=0,
    )
    choice = completion.choices[0]
    assert choice.message.role == "assistant" and choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    usage = completion.usage
    assert 0 < usage.completion_tokens <= 8 and usage.prompt_tokens > 5
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    # Greedy is deterministic.
    again = client.chat.completions.create(
        model="judge", messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=8, temperature=0,
    )
    assert again.choices[0].message.content == choice.message.content


def test_concurrent_requests_are_batched(judge):
    _, before = get_json(f"{judge.root_url}/stats")

    async def go():
        client = openai.AsyncOpenAI(base_url=judge.url, api_key="EMPTY", max_retries=0, timeout=TIMEOUT_S)
        questions = ["Name a colour.", "Name a fruit."] * 3
        tokens = [4, 6] * 3  # each row stops at its own max_tokens
        replies = await asyncio.gather(*(
            client.chat.completions.create(model="judge", messages=[{"role": "user", "content": q}],
                                           max_tokens=n, temperature=0)
            for q, n in zip(questions, tokens)
        ))
        await client.close()
        return replies

    replies = asyncio.run(go())
    texts = [r.choices[0].message.content for r in replies]
    assert all(t.strip() for t in texts)
    assert all(r.usage.completion_tokens <= n for r, n in zip(replies, [4, 6] * 3))
    _, after = get_json(f"{judge.root_url}/stats")
    assert after["requests"] - before["requests"] == 6
    # Fewer generate calls than requests: requests that arrive together share one.
    assert after["batches"] - before["batches"] < 6
    assert max(int(size) for size in after["batch_sizes"]) >= 2


def test_bad_requests_are_4xx(judge):
    client = openai.OpenAI(base_url=judge.url, api_key="EMPTY", max_retries=0, timeout=TIMEOUT_S)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.chat.completions.create(model="judge", messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=10**6)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="judge", messages=[], max_tokens=2)


def test_judge_worker_against_the_real_server(judge):
    results, worker = judge_capital_answers(judge.url, ["The capital of France is Paris.", "It is Berlin."],
                                            TIMEOUT_S)
    # The 135M model may well answer nonsense: that is "invalid", never a crash or an error.
    assert [r.status in ("ok", "invalid") for r in results] == [True, True], [r.info for r in results]
    for r in results:
        if r.status == "ok":
            assert r.reward in (0.0, 1.0) and r.correct is (r.reward == 1.0)
    assert worker.metrics()["judge/requests"] == 2


def test_stop_closes_the_port(judge):
    port = judge.port
    judge.stop()
    assert not judge.alive()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    judge.stop()  # idempotent


def test_start_up_failure_reports_stderr(tmp_path):
    bogus = tmp_path / "not-a-model"
    bogus.mkdir()
    (bogus / "config.json").write_text("{}")
    with pytest.raises(JudgeServerError) as caught:
        start_judge_server(str(bogus), prefer_vllm=False, startup_timeout_s=120)
    message = str(caught.value)
    assert "exited with code" in message and "cannot load the judge model" in message


def test_the_pipeline_starts_the_judge_in_the_dtype_asked_for(tiny_model_dir):
    from rlvr.config.load import load_config
    from rlvr.pipeline.build import start_local_judge

    cfg = load_config("configs/math_code_mix.yaml", [f"judge_server.model={tiny_model_dir}",
                                                     "judge_server.prefer_vllm=false", "judge_server.threads=1",
                                                     "judge_server.dtype=bfloat16"])
    handle, rewards = start_local_judge(cfg)
    try:
        assert rewards["judge"].args["base_url"] == handle.url and handle.backend == "transformers"
        assert "(bfloat16, 1 CPU threads)" in (handle.log_dir / "stderr.log").read_text()
    finally:
        handle.stop()
