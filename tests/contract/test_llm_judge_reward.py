"""LLMJudgeRewardWorker against a scripted stand-in for an OpenAI-compatible server on 127.0.0.1: statuses for
every failure mode, retries, the request cache, the concurrency cap, and the API key never leaking."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
import traceback

import pytest
from aiohttp import web

from rlvr.data.types import Prompt, Sample
from rlvr.workers.rewards.base import RewardLimits, TransientRewardError
from rlvr.workers.rewards.llm_judge import (
    DEFAULT_TEMPLATE,
    JSON_TEMPLATE,
    JudgeRequestError,
    JudgeTimeoutError,
    LLMJudgeRewardWorker,
)

FAST = RewardLimits(max_concurrency=4, timeout_s=3.0, max_retries=2, retry_backoff_s=0.01)
KEY_ENV = "RLVR_TEST_JUDGE_KEY"
CANARY = "sk-canary-7f3a9c1e5b2d4086"


class FakeOpenAIServerForTest:
    """A test stand-in for an OpenAI-compatible chat server (not a real judge): each request takes the next
    action from `script`, then `default`. It records every request and the peak number handled at once, and its
    error bodies echo the request's Authorization header, as a careless server might."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()

    def reset(self, default=("reply", "YES"), script=(), delay_s: float = 0.0) -> None:
        with self._lock:
            self.default = default
            self.script = list(script)
            self.delay_s = delay_s
            self.requests: list[dict] = []
            self.active = 0
            self.peak = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "FakeOpenAIServerForTest":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "the stand-in server did not start"
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        runner = web.AppRunner(app, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        auth = request.headers.get("Authorization", "")
        with self._lock:
            self.requests.append({"auth": auth, "body": body})
            action = self.script.pop(0) if self.script else self.default
            self.active += 1
            self.peak = max(self.peak, self.active)
            delay = self.delay_s
        try:
            if delay:
                await asyncio.sleep(delay)
            kind = action[0]
            if kind == "hang":
                try:
                    await asyncio.wait_for(self._stop.wait(), 30)
                except TimeoutError:
                    pass
                return web.Response(status=504)
            if kind == "status":
                return web.json_response(
                    {"error": {"message": f"injected {action[1]} for request with {auth}", "type": "x"}},
                    status=action[1])
            if kind == "raw":
                return web.Response(body=action[1], content_type=action[2])
            if kind == "reply":
                content = action[1]
                choices = [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]
            elif kind == "logprobs":  # ("logprobs", content, [(chosen token, logprob, [(token, logprob), ...]), ...])
                entries = [{"token": t, "logprob": lp, "bytes": list(t.encode()),
                            "top_logprobs": [{"token": tt, "logprob": tlp, "bytes": list(tt.encode())}
                                             for tt, tlp in top]} for t, lp, top in action[2]]
                choices = [{"index": 0, "message": {"role": "assistant", "content": action[1]},
                            "logprobs": {"content": entries}, "finish_reason": "length"}]
            elif kind == "no_choices":
                choices = []
            else:
                raise AssertionError(f"unknown action {action}")
            return web.json_response({"id": "chatcmpl-test", "object": "chat.completion", "created": 0,
                                      "model": body.get("model"), "choices": choices,
                                      "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
        finally:
            with self._lock:
                self.active -= 1


@pytest.fixture(scope="module")
def stand_in():
    server = FakeOpenAIServerForTest().start()
    yield server
    server.stop()


@pytest.fixture
def server(stand_in, monkeypatch):
    stand_in.reset()
    monkeypatch.setenv(KEY_ENV, CANARY)
    return stand_in


def make_sample(response="The answer is 42.", truth="42", question="What is 6*7?", index=0):
    prompt = Prompt(uid=f"p{index}", domain="qa", ground_truth=truth, messages=[
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "an earlier question"},
        {"role": "assistant", "content": "an earlier answer"},
        {"role": "user", "content": question},
    ])
    return Sample(prompt=prompt, group_id="g0", index=index, response_ids=[], response_text=response,
                  finish_reason="stop", policy_version=0)


def make_worker(server, limits=FAST, **kwargs):
    kwargs.setdefault("api_key_env", KEY_ENV)
    return LLMJudgeRewardWorker("qa", limits, base_url=server.url, **kwargs)


def evaluate(worker, *samples):
    async def go():
        return await asyncio.gather(*(worker.evaluate(s) for s in samples))

    results = asyncio.run(go())
    return results[0] if len(results) == 1 else results


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- verdicts and requests -------------------------------------------------------------------------------


def test_yes_and_no_verdicts(server):
    worker = make_worker(server)
    server.reset(script=[("reply", "YES")], default=("reply", "No."))
    yes = evaluate(worker, make_sample(index=0))
    no = evaluate(worker, make_sample(response="41", index=1))
    assert (yes.status, yes.reward, yes.correct, yes.parts) == ("ok", 1.0, True, {"judge": 1.0})
    assert (no.status, no.reward, no.correct) == ("ok", 0.0, False)
    assert len(server.requests) == 2
    body = server.requests[0]["body"]
    assert body["model"] == "judge" and body["temperature"] == 0.0 and body["max_tokens"] == 16
    assert server.requests[0]["auth"] == f"Bearer {CANARY}"  # the key from the environment is what is sent


def test_request_fills_the_template(server):
    worker = make_worker(server, system_prompt="You are a strict grader.")
    sample = make_sample(response="<think>maybe 41? scratch</think>It is 42, not {reference}.", truth="42",
                         question="What is 6*7?")
    assert evaluate(worker, sample).status == "ok"
    messages = server.requests[0]["body"]["messages"]
    assert messages[0] == {"role": "system", "content": "You are a strict grader."}
    content = messages[1]["content"]
    assert "What is 6*7?" in content and "an earlier question" not in content  # the last user message
    assert "It is 42, not {reference}." in content  # braces in the response are not filled in again
    assert "scratch" not in content and "<think>" not in content  # reasoning stripped
    assert "Reference answer:\n42\n" in content
    assert content == worker.build_messages(sample)[1]["content"]


def test_missing_key_sends_placeholder(server, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    assert evaluate(make_worker(server), make_sample()).status == "ok"
    assert server.requests[0]["auth"] == "Bearer EMPTY"


def test_score_and_json_modes(server):
    worker = make_worker(server, parse_mode="score", correct_threshold=0.6)
    server.reset(script=[("reply", "Reasoning... Score: 8/10")], default=("reply", "Rating: 5 out of 10"))
    # one after the other: the scripted reply goes to whichever request arrives first
    high = evaluate(worker, make_sample(index=0))
    low = evaluate(worker, make_sample(response="x", index=1))
    assert (high.status, high.reward, high.correct) == ("ok", 0.8, True)
    assert (low.status, low.reward, low.correct) == ("ok", 0.5, False)
    assert "Score: N/10" in server.requests[0]["body"]["messages"][0]["content"]  # the score template
    worker = make_worker(server, parse_mode="score", max_score=5)
    assert "Score: N/5" in worker.build_messages(make_sample())[0]["content"]

    server.reset(default=("reply", 'Sure:\n```json\n{"verdict": "no", "reason": "off by one"}\n```'))
    worker = make_worker(server, parse_mode="json")
    result = evaluate(worker, make_sample())
    assert (result.status, result.reward, result.correct) == ("ok", 0.0, False)
    assert worker.prompt_template == JSON_TEMPLATE != DEFAULT_TEMPLATE


# -- failures --------------------------------------------------------------------------------------------


def test_500_is_retried_then_error(server):
    server.reset(default=("status", 500))
    worker = make_worker(server)
    result = evaluate(worker, make_sample())
    assert result.status == "error" and "500" in result.info and "attempt 3 of 3" in result.info
    assert len(server.requests) == 3 and worker.metrics()["retries"] == 2


def test_429_then_success(server):
    server.reset(script=[("status", 429)])
    worker = make_worker(server)
    result = evaluate(worker, make_sample())
    assert (result.status, result.reward) == ("ok", 1.0)
    assert len(server.requests) == 2 and worker.metrics()["retries"] == 1


def test_other_4xx_is_an_error_without_retry(server):
    server.reset(default=("status", 400))
    worker = make_worker(server)
    result = evaluate(worker, make_sample())
    assert result.status == "error" and "HTTP 400" in result.info
    assert len(server.requests) == 1 and worker.metrics()["retries"] == 0


def test_hanging_judge_times_out(server):
    server.reset(default=("hang",))
    worker = make_worker(server, RewardLimits(timeout_s=0.5, max_retries=0))
    started = time.perf_counter()
    result = evaluate(worker, make_sample())
    assert result.status == "timeout" and time.perf_counter() - started < 3


def test_http_timeout_is_retried_then_timeout(server):
    server.reset(default=("hang",))
    limits = RewardLimits(timeout_s=5.0, max_retries=1, retry_backoff_s=0.01)
    worker = make_worker(server, limits, request_timeout_s=0.3)
    result = evaluate(worker, make_sample())
    assert result.status == "timeout" and "did not answer within 0.3s" in result.info
    assert len(server.requests) == 2 and worker.metrics()["retries"] == 1


def test_garbage_reply_is_invalid(server):
    garbage = "I think the weather is lovely today and the cat sat on the mat. " * 10
    server.reset(default=("reply", garbage))
    result = evaluate(make_worker(server), make_sample())
    assert result.status == "invalid" and garbage[:200] in result.info
    assert result.reward != result.reward  # NaN: a failed reward is never a silent 0


@pytest.mark.parametrize("action", [("no_choices",), ("reply", None), ("reply", "")])
def test_reply_without_text_is_invalid(server, action):
    server.reset(default=action)
    assert evaluate(make_worker(server), make_sample()).status == "invalid"


@pytest.mark.parametrize("action", [
    ("raw", b'{"choices": [{"message": ', "application/json"),  # malformed JSON
    ("raw", b"YES", "text/plain"),  # not JSON at all
    ("raw", b'{"unexpected": true}', "application/json"),  # JSON, but not a chat completion
])
def test_bad_body_is_an_error_without_retry(server, action):
    server.reset(default=action)
    worker = make_worker(server)
    result = evaluate(worker, make_sample())
    assert result.status == "error" and "judge" in result.info
    assert len(server.requests) == 1


def test_unreachable_judge_is_retried_then_error(server):
    worker = LLMJudgeRewardWorker("qa", FAST, base_url=f"http://127.0.0.1:{closed_port()}/v1", api_key_env=KEY_ENV)
    result = evaluate(worker, make_sample())
    assert result.status == "error" and "cannot reach the judge" in result.info
    assert worker.metrics()["retries"] == 2


def test_no_base_url_until_the_pipeline_sets_it(server):
    worker = LLMJudgeRewardWorker("qa", FAST, base_url=None, api_key_env=KEY_ENV)
    result = evaluate(worker, make_sample())
    assert result.status == "error" and "base_url" in result.info and worker.metrics()["retries"] == 0
    worker.base_url = server.url
    assert evaluate(worker, make_sample()).status == "ok"


# -- cache and concurrency -------------------------------------------------------------------------------


def test_identical_requests_are_sent_once(server):
    worker = make_worker(server)
    first = evaluate(worker, make_sample(index=0))
    second = evaluate(worker, make_sample(index=1))  # another event loop, same request: from the cache
    assert first.status == second.status == "ok" and second.info.endswith("cached")
    assert len(server.requests) == 1
    evaluate(worker, make_sample(response="something else"))
    assert len(server.requests) == 2
    metrics = worker.metrics()
    assert metrics["judge/requests"] == 2 and metrics["judge/cache_hits"] == 1


def test_concurrent_identical_requests_share_one_call(server):
    server.reset(delay_s=0.3)
    worker = make_worker(server)
    results = evaluate(worker, *(make_sample(index=i) for i in range(4)))
    assert [r.status for r in results] == ["ok"] * 4
    assert len(server.requests) == 1 and worker.metrics()["judge/shared_calls"] == 3


async def until_server_has(server, n):
    for _ in range(500):
        if len(server.requests) >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the stand-in saw {len(server.requests)} requests, not {n}")


def test_a_caller_leaving_does_not_cancel_the_shared_call(server):
    server.reset(delay_s=0.5)
    worker = make_worker(server)

    async def go():
        first = asyncio.create_task(worker.score(make_sample(index=0)))
        second = asyncio.create_task(worker.score(make_sample(index=1)))
        await until_server_has(server, 1)
        first.cancel()  # e.g. its deadline passed
        return await second

    assert asyncio.run(go()).status == "ok" and len(server.requests) == 1


def test_a_caller_arriving_as_the_last_one_leaves_gets_a_fresh_call(server):
    server.reset(delay_s=0.5)
    worker = make_worker(server)

    async def go():
        first = asyncio.create_task(worker.score(make_sample()))
        await until_server_has(server, 1)
        first.cancel()  # the shared call is cancelled with its last caller...
        second = asyncio.create_task(worker.score(make_sample()))  # ...and this one must not join it
        await asyncio.gather(first, return_exceptions=True)
        return await second

    assert asyncio.run(go()).status == "ok" and len(server.requests) == 2


def test_shared_call_failure_reaches_every_caller(server):
    server.reset(default=("status", 503), delay_s=0.1)
    worker = make_worker(server, RewardLimits(max_retries=0))
    results = evaluate(worker, make_sample(index=0), make_sample(index=1))
    assert [r.status for r in results] == ["error", "error"] and len(server.requests) == 1


def test_cache_size_zero_and_lru_eviction(server):
    worker = make_worker(server, cache_size=0)
    evaluate(worker, make_sample())
    evaluate(worker, make_sample())
    assert len(server.requests) == 2

    server.reset()
    worker = make_worker(server, cache_size=1)
    for response in ("a", "b", "a", "a"):
        evaluate(worker, make_sample(response=response))
    assert len(server.requests) == 3  # "a" was evicted by "b", then cached again


def test_concurrency_cap_is_respected(server):
    server.reset(delay_s=0.4)
    worker = make_worker(server, RewardLimits(max_concurrency=3, timeout_s=10))
    results = evaluate(worker, *(make_sample(response=f"answer {i}", index=i) for i in range(9)))
    assert all(r.status == "ok" for r in results)
    assert len(server.requests) == 9 and server.peak == 3
    assert worker.metrics()["in_flight_peak"] == 3


# -- the API key -----------------------------------------------------------------------------------------


def test_api_key_never_leaks(server, caplog):
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []
    worker = make_worker(server)
    seen += [repr(worker), str(worker), repr(vars(worker))]
    for default in [("status", 401), ("status", 500), ("status", 429), ("reply", "garbage " * 50),
                    ("raw", b"{oops", "application/json"), ("hang",)]:
        server.reset(default=default)
        worker = make_worker(server, RewardLimits(timeout_s=1.0, max_retries=1, retry_backoff_s=0.01),
                             request_timeout_s=0.5)
        result = evaluate(worker, make_sample())
        assert result.status != "ok"
        seen += [result.info, repr(result), repr(worker)]
        # And the exception score() raises, with its traceback, as a log handler would format it.
        if default[0] in ("status", "raw", "hang"):
            with pytest.raises((TransientRewardError, JudgeRequestError, JudgeTimeoutError)) as caught:
                asyncio.run(worker.score(make_sample(response="not cached")))
            seen += [str(caught.value), repr(caught.value), "".join(traceback.format_exception(caught.value))]
    assert any(r["auth"] == f"Bearer {CANARY}" for r in server.requests)  # the server did get the key...
    unreachable = LLMJudgeRewardWorker("qa", FAST, base_url=f"http://127.0.0.1:{closed_port()}/v1",
                                       api_key_env=KEY_ENV)
    seen.append(evaluate(unreachable, make_sample()).info)
    seen.append(caplog.text)
    seen += [r.getMessage() for r in caplog.records]
    leaks = [text for text in seen if CANARY in text]
    assert not leaks, f"the API key leaked into: {leaks[0][:300]!r}"
    assert any("***" in text for text in seen)  # the echoed key was masked, not merely absent


# -- yes_no_logprobs: the verdict from token probabilities -------------------------------------------------

LN = __import__("math").log


def first_token(chosen, p, *top):
    """A `logprobs` action whose single token is `chosen` (probability p) with `top` as (token, p) pairs."""
    return ("logprobs", chosen, [(chosen, LN(p), [(t, LN(q)) for t, q in top])])


def test_logprobs_mode_request_and_verdicts(server):
    worker = make_worker(server, parse_mode="yes_no_logprobs")
    server.reset(script=[first_token("Yes", 0.5, ("Yes", 0.5), (" yes", 0.1), ("No", 0.3))],
                 default=first_token("The", 0.5, ("The", 0.5), ("No", 0.2), ("yes", 0.05)))
    yes = evaluate(worker, make_sample(index=0))
    no = evaluate(worker, make_sample(response="41", index=1))
    assert (yes.status, yes.reward, yes.correct) == ("ok", 1.0, True)
    assert yes.parts["judge"] == 1.0 and yes.parts["p_yes"] == pytest.approx(0.6 / 0.9)
    assert yes.parts["margin"] == pytest.approx(2 * 0.6 / 0.9 - 1)
    assert "P(yes)=0.6" in yes.info and "P(no)=0.3" in yes.info
    # "The" was the likeliest first token, but NO outweighs YES among the alternatives.
    assert (no.status, no.reward, no.correct) == ("ok", 0.0, False) and no.parts["p_yes"] == pytest.approx(0.2)
    body = server.requests[0]["body"]
    assert body["logprobs"] is True and body["top_logprobs"] == 20 and body["max_tokens"] == 1
    assert body["temperature"] == 0.0
    assert "YES or NO" in body["messages"][-1]["content"] and "What is 6*7?" in body["messages"][-1]["content"]


def test_logprobs_mode_settings(server):
    worker = make_worker(server, parse_mode="yes_no_logprobs", top_logprobs=5, max_tokens=3)
    server.reset(default=first_token("No", 0.9, ("No", 0.9)))
    assert evaluate(worker, make_sample()).reward == 0.0
    body = server.requests[0]["body"]
    assert body["top_logprobs"] == 5 and body["max_tokens"] == 3
    with pytest.raises(ValueError, match="top_logprobs"):
        make_worker(server, parse_mode="yes_no_logprobs", top_logprobs=21)


def test_text_modes_ask_for_no_logprobs(server):
    evaluate(make_worker(server), make_sample())
    assert "logprobs" not in server.requests[0]["body"] and "top_logprobs" not in server.requests[0]["body"]


def test_logprobs_mode_invalid_only_without_either_word(server):
    server.reset(default=first_token("The", 0.6, ("The", 0.6), ("A", 0.1), ("Not", 0.1), ("Yesterday", 0.01)))
    result = evaluate(make_worker(server, parse_mode="yes_no_logprobs"), make_sample())
    assert result.status == "invalid" and "neither YES nor NO" in result.info
    assert result.reward != result.reward  # NaN, never a silent 0


def test_logprobs_mode_reads_an_empty_or_null_text_reply(server):
    # The first token was the end of the turn: no text, but its alternatives were returned.
    for content in ("", None):
        server.reset(default=("logprobs", content, [("<|im_end|>", LN(0.5), [("<|im_end|>", LN(0.5)),
                                                                             ("Yes", LN(0.3)), ("No", LN(0.1))])]))
        result = evaluate(make_worker(server, parse_mode="yes_no_logprobs"), make_sample())
        assert (result.status, result.reward, result.correct) == ("ok", 1.0, True)


def test_logprobs_mode_falls_back_to_text_without_logprobs(server):
    """A server that ignores `logprobs` still gives a verdict, read from its text."""
    worker = make_worker(server, parse_mode="yes_no_logprobs")
    server.reset(script=[("reply", "No.")], default=("reply", "I cannot tell."))
    no = evaluate(worker, make_sample(index=0))
    assert (no.status, no.reward, no.correct) == ("ok", 0.0, False) and "read as text" in no.info
    assert "p_yes" not in no.parts
    assert evaluate(worker, make_sample(response="other", index=1)).status == "invalid"


def test_logprobs_replies_are_cached_with_their_probabilities(server):
    worker = make_worker(server, parse_mode="yes_no_logprobs")
    server.reset(default=first_token("Yes", 0.7, ("Yes", 0.7), ("No", 0.2)))
    first = evaluate(worker, make_sample(index=0))
    second = evaluate(worker, make_sample(index=1))
    assert len(server.requests) == 1 and second.info.endswith("cached")
    assert first.parts == second.parts and second.parts["p_yes"] == pytest.approx(0.7 / 0.9)
