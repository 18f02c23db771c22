"""LLM-as-judge reward: ask a model behind any OpenAI-compatible endpoint whether a response is right.

    domains:
      open_qa:
        reward:
          worker: rlvr.workers.rewards.llm_judge.LLMJudgeRewardWorker
          timeout_s: 30           # per attempt; request_timeout_s below is the HTTP client's own limit
          max_retries: 2          # 429, 5xx, dropped connections and HTTP timeouts are retried by the base class
          args:
            base_url: http://judge.internal:8000/v1   # any OpenAI-compatible server (vLLM, SGLang, OpenAI)
            model: judge
            api_key_env: RLVR_JUDGE_API_KEY           # the key is read from this variable, never from config
            parse_mode: yes_no                        # yes_no | yes_no_logprobs | score | json (judge_parsing.py)

Local mode (`base_url` left out): the pipeline starts the embedded judge server itself
(`rlvr.judge_server.start_judge_server`: vLLM when installed, else a transformers server on loopback) and
passes its URL to the worker in `args` as `base_url`; a worker may also be built with `base_url=None` and get
`worker.base_url = handle.url` later. A worker that is asked to score before it has a URL reports status
"error" saying so.

One request per sample: the prompt template gets `{question}` (the prompt's last user message, or its raw
text), `{response}` (the sample's response with `<think>` reasoning removed) and `{reference}` (the prompt's
ground truth), and `{max_score}`. Other braces in a template are left alone, so a template may show a JSON
example. A worker left with DEFAULT_TEMPLATE (the YES/NO question) in score or json mode gets SCORE_TEMPLATE or
JSON_TEMPLATE instead, which ask for what that mode's parser reads.

yes_no_logprobs reads the verdict from token probabilities instead of text, for judges too small to answer
reliably in words (and as a cheaper, steadier verdict from any judge): the request asks for `max_tokens` 1 (the
default in this mode), `logprobs: true` and `top_logprobs` (20), and the verdict is YES when the YES-like first
tokens carry more probability than the NO-like ones (judge_parsing.parse_logprob_verdict). parts then also hold
`p_yes` (P(yes) / (P(yes) + P(no))) and `margin` (2 p_yes - 1), and info the probabilities; status "invalid"
only when neither word is among the top tokens. It works with vLLM's OpenAI server, the OpenAI API and the
embedded transformers server; a reply that comes without logprobs is read as yes_no text.

- Identical requests are sent once: replies are kept in an LRU cache keyed by the exact request (URL, model,
  messages, temperature, max_tokens), and identical requests in flight at the same time share one HTTP call.
  With temperature > 0 that means one sample of the judge per distinct request; set cache_size=0 to disable
  the cache (in-flight sharing stays).
- Failures: 429, 408 and 5xx answers and connection errors raise TransientRewardError (retried by the base
  class with backoff, then status "error"); an HTTP timeout raises JudgeTimeoutError (retried likewise, then
  status "timeout"); other 4xx answers and bodies that are not a chat completion are status "error" at once;
  a reply the parser cannot read is status "invalid" with the reply's first 200 characters in `info`.
- The API key is read from the environment when the HTTP client is made and is kept nowhere else: not in the
  worker's attributes or repr, and every message that leaves the worker has it masked.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections import OrderedDict
from typing import Any, NamedTuple

import openai

from rlvr.data.reward_result import RewardResult
from rlvr.workers.rewards.base import RewardLimits, RewardWorker, TransientRewardError
from rlvr.workers.rewards.judge_parsing import PARSE_MODES, ParseMode, parse_logprob_verdict, parse_verdict
from rlvr.workers.rewards.math_answer import strip_thinking

logger = logging.getLogger(__name__)

DEFAULT_TEMPLATE = """You are grading an answer to a question. Compare the response's final answer with the \
reference answer: it is correct if it means the same thing, even if it is worded or formatted differently.

Question:
{question}

Reference answer:
{reference}

Response:
{response}

Is the response's final answer correct? Reply with one word: YES or NO."""

SCORE_TEMPLATE = """You are grading an answer to a question against a reference answer.

Question:
{question}

Reference answer:
{reference}

Response:
{response}

Rate the response's correctness from 0 (wrong) to {max_score} (fully correct). Reply in the form \
"Score: N/{max_score}"."""

# The logprob mode reads P(YES) against P(NO) at the verdict's first token, which the yes/no prompt already asks
# for, so it keeps that prompt; bench/judge_verdicts.py scores both modes on it side by side.
LOGPROBS_TEMPLATE = DEFAULT_TEMPLATE

JSON_TEMPLATE = """You are grading an answer to a question against a reference answer.

Question:
{question}

Reference answer:
{reference}

Response:
{response}

Reply with a JSON object only, for example {"verdict": "yes"} if the response's final answer is correct \
and {"verdict": "no"} if it is not."""

# DEFAULT_TEMPLATE asks for YES/NO; a worker in another parse mode that keeps the default gets the template
# that asks for what its parser reads.
MODE_TEMPLATES: dict[str, str] = {"yes_no": DEFAULT_TEMPLATE, "yes_no_logprobs": LOGPROBS_TEMPLATE,
                                  "score": SCORE_TEMPLATE, "json": JSON_TEMPLATE}

_FIELD = re.compile(r"\{(question|response|reference|max_score)\}")
_TRANSIENT_HTTP = frozenset({408, 425, 429})
_USERINFO = re.compile(r"(//)[^/@\s]+@")


class JudgeTimeoutError(TransientRewardError, TimeoutError):
    """The judge's HTTP call timed out: retried like any transient error, reported as status "timeout"."""


class JudgeRequestError(RuntimeError):
    """A judge call that retrying will not fix: a 4xx answer, a body that is not a chat completion, no URL."""


class _InvalidReply(Exception):
    """The call worked but carried no reply text to parse (no choices, null content)."""


class _LoopState:
    """What belongs to one event loop: the HTTP client (its connections) and the calls in flight."""

    def __init__(self, loop: asyncio.AbstractEventLoop, client: Any) -> None:
        self.loop = loop
        self.client = client
        self.in_flight: dict[str, list[Any]] = {}  # request key -> [task, number of callers waiting on it]
        self.closer = _close_with_loop(client)


async def _close_with_loop(client: Any):
    """An async generator that closes `client` when it is closed itself (see LLMJudgeRewardWorker._loop_state)."""
    try:
        yield
    finally:
        try:
            await client.close()
        except Exception:  # closing is best effort: the connections may already be gone
            pass


class LLMJudgeRewardWorker(RewardWorker):
    """reward = the judge's verdict (yes_no: 1/0; score: score / max_score; json: score or verdict).

    parts: {"judge": reward}, plus p_yes and margin in yes_no_logprobs mode. correct: the judge's yes/no when it gave one, else reward >= correct_threshold.
    info: what the parser found ("verdict 'YES'", "labelled score 'Score: 7/10'"), plus ", cached" when the reply
    came from the cache. metrics() adds judge/requests (HTTP calls made), judge/cache_hits and
    judge/shared_calls (samples that joined an identical call in flight).
    """

    # Everything transient is turned into TransientRewardError (JudgeTimeoutError included) in _call, where the
    # message is also cleaned of the API key; the client's own exception types never reach the base class.
    retry_on = (TransientRewardError,)

    def __init__(
        self,
        domain: str,
        limits: RewardLimits | None = None,
        base_url: str | None = None,
        model: str = "judge",
        api_key_env: str | None = "RLVR_JUDGE_API_KEY",
        prompt_template: str = DEFAULT_TEMPLATE,
        system_prompt: str | None = None,
        parse_mode: ParseMode = "yes_no",
        max_score: float = 10,
        correct_threshold: float = 0.5,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        request_timeout_s: float = 30.0,
        cache_size: int = 10000,
        top_logprobs: int = 20,
    ) -> None:
        if parse_mode not in PARSE_MODES:
            raise ValueError(f"parse_mode must be one of {PARSE_MODES}, got {parse_mode!r}")
        if not (isinstance(max_score, (int, float)) and max_score > 0):
            raise ValueError(f"max_score must be a positive number, got {max_score!r}")
        if "{response}" not in prompt_template:
            raise ValueError("prompt_template must contain {response} (and usually {question} and {reference})")
        if max_tokens is None:
            max_tokens = 1 if parse_mode == "yes_no_logprobs" else 16
        if max_tokens < 1 or request_timeout_s <= 0 or cache_size < 0:
            raise ValueError("max_tokens must be >= 1, request_timeout_s > 0 and cache_size >= 0")
        if not (isinstance(top_logprobs, int) and 1 <= top_logprobs <= 20):
            raise ValueError(f"top_logprobs must be an integer in [1, 20] (the OpenAI limit), got {top_logprobs!r}")
        super().__init__(domain, limits)
        self._base_url = base_url
        self.model = model
        self.api_key_env = api_key_env
        if prompt_template == DEFAULT_TEMPLATE:
            prompt_template = MODE_TEMPLATES[parse_mode]
        self.prompt_template = prompt_template
        self.system_prompt = system_prompt
        self.parse_mode = parse_mode
        self.max_score = max_score
        self.correct_threshold = correct_threshold
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.top_logprobs = top_logprobs
        self.request_timeout_s = request_timeout_s
        self.cache_size = cache_size
        self._cache: OrderedDict[str, _Reply] = OrderedDict()
        self._state: _LoopState | None = None

    # -- configuration ------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str | None:
        return self._base_url

    @base_url.setter
    def base_url(self, url: str | None) -> None:
        """Set by the pipeline in local mode once its judge server is up; drops the client made for the old URL."""
        if url != self._base_url:
            self._base_url = url
            self._drop_client()

    def __repr__(self) -> str:
        url = _USERINFO.sub(r"\1***@", self._base_url) if self._base_url else None
        return (
            f"{type(self).__name__}(domain={self.domain!r}, base_url={url!r}, model={self.model!r}, "
            f"parse_mode={self.parse_mode!r}, api_key_env={self.api_key_env!r})"
        )

    # -- scoring ------------------------------------------------------------------------------------------

    def build_messages(self, sample: Any) -> list[dict[str, str]]:
        """The chat messages sent for `sample` (public so that a template can be checked by hand)."""
        fields = {
            "question": _question(sample.prompt),
            "response": strip_thinking(sample.response_text or "").strip(),
            "reference": _text(sample.prompt.ground_truth),
            "max_score": f"{self.max_score:g}",
        }
        # One pass: a response that contains "{reference}" is not filled in again.
        content = _FIELD.sub(lambda m: fields[m.group(1)], self.prompt_template)
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": content})
        return messages

    async def score(self, sample: Any) -> RewardResult:
        if not self._base_url:
            raise JudgeRequestError(
                "no judge base_url: set args.base_url to an OpenAI-compatible endpoint, or leave it out and let "
                "the pipeline start the local judge server and pass its URL"
            )
        request = {
            "model": self.model,
            "messages": self.build_messages(sample),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if self.parse_mode == "yes_no_logprobs":
            request.update(logprobs=True, top_logprobs=self.top_logprobs)
        key = json.dumps([self._base_url, request], sort_keys=True, ensure_ascii=False)
        reply = self._cache_get(key)
        cached = reply is not None
        if reply is None:
            try:
                reply = await self._shared_call(key, request)
            except _InvalidReply as e:
                return RewardResult.failed("invalid", self._redact(str(e)))
        parts: dict[str, float] = {}
        if self.parse_mode == "yes_no_logprobs" and reply.logprobs is not None:
            reward, correct, why, p_yes = parse_logprob_verdict(reply.logprobs)
            if p_yes is not None:
                parts = {"p_yes": p_yes, "margin": 2 * p_yes - 1}
        elif reply.text is None:  # logprobs mode: neither logprobs nor text came back
            return RewardResult.failed("invalid", "judge reply has neither logprobs nor message content")
        else:
            reward, correct, why = parse_verdict(reply.text, self.parse_mode, self.max_score)
            if self.parse_mode == "yes_no_logprobs":
                why = f"no logprobs in the reply, read as text: {why}"
        if reward is None:
            return RewardResult.failed(
                "invalid", self._redact(f"unparseable judge reply ({why}): {(reply.text or '')[:200]}"))
        if correct is None:
            correct = reward >= self.correct_threshold
        info = f"{why}, cached" if cached else why
        return RewardResult(reward=reward, correct=correct, parts={"judge": reward, **parts},
                            info=self._redact(info[:300]))

    # -- metrics ------------------------------------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        out["judge/requests"] = float(self._requests)
        out["judge/cache_hits"] = float(self._cache_hits)
        out["judge/shared_calls"] = float(self._shared)
        return out

    def reset_metrics(self) -> None:
        super().reset_metrics()
        self._requests = 0  # HTTP calls started
        self._cache_hits = 0  # samples answered from the cache
        self._shared = 0  # samples that joined an identical call already in flight

    def close(self) -> None:
        self._drop_client()
        super().close()

    async def aclose(self) -> None:
        """Closes the HTTP client from inside its event loop (close() can only schedule that)."""
        state, self._state = self._state, None
        if state is not None and state.loop is asyncio.get_running_loop():
            await state.closer.aclose()
        super().close()

    # -- internals ----------------------------------------------------------------------------------------

    def _cache_get(self, key: str) -> _Reply | None:
        reply = self._cache.get(key)
        if reply is not None:
            self._cache.move_to_end(key)
            self._cache_hits += 1
        return reply

    def _cache_put(self, key: str, reply: _Reply) -> None:
        if self.cache_size <= 0:
            return
        self._cache[key] = reply
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    async def _shared_call(self, key: str, request: dict[str, Any]) -> _Reply:
        """One HTTP call per distinct request in flight: later identical callers wait on the first one's task.
        A caller that gives up (deadline, cancellation) leaves the call running for the others; the call is
        cancelled when the last caller has gone."""
        state = await self._loop_state()
        entry = state.in_flight.get(key)
        if entry is None:
            task = asyncio.ensure_future(self._call(key, request))
            entry = [task, 0]
            state.in_flight[key] = entry

            def _done(t: asyncio.Task, entry: list[Any] = entry) -> None:
                if state.in_flight.get(key) is entry:
                    del state.in_flight[key]
                if not t.cancelled():
                    t.exception()  # retrieved here, so an error nobody waited for is not logged as lost

            task.add_done_callback(_done)
        else:
            self._shared += 1
        entry[1] += 1
        try:
            return await asyncio.shield(entry[0])
        finally:
            entry[1] -= 1
            if entry[1] == 0 and not entry[0].done():
                entry[0].cancel()
                # Unlisted at once: a caller arriving before the task has unwound must start a fresh call,
                # not join one that is about to raise CancelledError.
                if state.in_flight.get(key) is entry:
                    del state.in_flight[key]

    async def _call(self, key: str, request: dict[str, Any]) -> _Reply:
        client = (await self._loop_state()).client
        self._requests += 1
        where = _USERINFO.sub(r"\1***@", self._base_url or "")
        try:
            completion = await client.chat.completions.create(**request)
        except openai.APITimeoutError:
            raise JudgeTimeoutError(f"judge at {where} did not answer within {self.request_timeout_s}s") from None
        except openai.APIConnectionError as e:
            cause = f": {type(e.__cause__).__name__}: {e.__cause__}" if e.__cause__ else ""
            raise TransientRewardError(self._redact(f"cannot reach the judge at {where}{cause}"[:300])) from None
        except openai.APIStatusError as e:
            message = self._redact(f"judge at {where} answered HTTP {e.status_code}: {_short(e.message)}")
            if e.status_code in _TRANSIENT_HTTP or e.status_code >= 500:
                raise TransientRewardError(message) from None
            raise JudgeRequestError(message) from None
        except (openai.OpenAIError, ValueError) as e:  # a body that is not JSON (JSONDecodeError), and the like
            raise JudgeRequestError(
                self._redact(f"judge at {where} sent a bad reply body: {type(e).__name__}: {_short(str(e))}")
            ) from None
        try:
            reply = _Reply(_reply_text(completion),
                           _reply_logprobs(completion) if request.get("logprobs") else None)
        except JudgeRequestError as e:
            raise JudgeRequestError(self._redact(str(e))) from None
        if reply.text is None and reply.logprobs is None:
            raise _InvalidReply(self._redact(f"judge reply has no message content: {_short(repr(completion))}"))
        self._cache_put(key, reply)
        return reply

    async def _loop_state(self) -> _LoopState:
        """The HTTP client of the running loop; made on first use in each loop (connections belong to one)."""
        loop = asyncio.get_running_loop()
        if self._state is None or self._state.loop is not loop:
            self._drop_client()
            api_key = (os.environ.get(self.api_key_env) if self.api_key_env else None) or "EMPTY"
            # An HTTP client of our own: the one openai makes by default closes itself on garbage collection
            # by scheduling a task on whatever loop runs then, which fails for connections of a closed loop.
            client = openai.AsyncOpenAI(
                base_url=self._base_url, api_key=api_key, max_retries=0, timeout=self.request_timeout_s,
                http_client=openai.DefaultAsyncHttpxClient(timeout=self.request_timeout_s),
            )
            state = _LoopState(loop, client)
            # Runs to its `yield` at once (no suspension: no other call can slip in). Its `finally` closes the
            # client while its loop still runs: asyncio.run closes async generators before the loop, and a
            # dropped state's generator is finalized by the loop.
            await state.closer.__anext__()
            self._state = state
        return self._state

    def _drop_client(self) -> None:
        state, self._state = self._state, None
        if state is None:
            return
        try:
            if state.loop.is_running():
                state.loop.call_soon_threadsafe(lambda: state.loop.create_task(state.closer.aclose()))
        except RuntimeError:  # the loop closed meanwhile, and closed the client on its way out
            pass

    def _redact(self, text: str) -> str:
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key and len(key) >= 4:
            text = text.replace(key, "***")
        return text


def _question(prompt: Any) -> str:
    """The prompt's last user message (text parts joined), else its raw text."""
    for message in reversed(prompt.messages or []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
            return _text(content)
    return prompt.text or ""


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


class _Reply(NamedTuple):
    """What a judge call brought back: the message text, and in yes_no_logprobs mode the first choice's
    `logprobs.content` as plain dicts (None when the reply had none)."""

    text: str | None
    logprobs: list[dict[str, Any]] | None = None


def _reply_logprobs(completion: Any) -> list[dict[str, Any]] | None:
    """choices[0].logprobs.content as [{"token", "logprob", "top_logprobs": [{"token", "logprob"}]}], else None."""
    choices = getattr(completion, "choices", None) or []
    logprobs = getattr(choices[0], "logprobs", None) if choices else None
    content = getattr(logprobs, "content", None)
    if not isinstance(content, list) or not content:
        return None

    def token(entry: Any) -> dict[str, Any]:
        return {"token": getattr(entry, "token", None), "logprob": getattr(entry, "logprob", None)}

    return [{**token(e), "top_logprobs": [token(t) for t in (getattr(e, "top_logprobs", None) or [])]}
            for e in content]


def _reply_text(completion: Any) -> str | None:
    """choices[0].message.content; None for a completion without one (no choices, null content: "invalid").
    Raises JudgeRequestError for a body that is no chat completion at all (text, JSON without choices)."""
    choices = getattr(completion, "choices", None)
    if not isinstance(choices, list):
        raise JudgeRequestError(f"judge reply is not a chat completion: {_short(repr(completion))}")
    if not choices:
        return None
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    return content if isinstance(content, str) else None


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
