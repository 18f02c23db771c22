"""An OpenAI-compatible chat server on transformers, for the embedded default judge (no vLLM needed).

    python -m rlvr.judge_server --model <hf model dir> [--port 0] [--served-model-name judge]

prints `http://127.0.0.1:<port>/v1` (the base URL for OpenAI clients) as the first line on stdout as soon as
it listens; `GET /health` answers 503 while the model loads and 200 once it serves. Logs go to stderr.

Endpoints: `GET /health`, `GET /v1/models`, `POST /v1/chat/completions` (non-streaming: messages, model,
max_tokens / max_completion_tokens, temperature, top_p, n, stop, logprobs, top_logprobs), and `GET /stats`
(batching counters).

Logprobs: `logprobs: true` (with `top_logprobs` 0..20) adds `choices[i].logprobs.content` in the OpenAI format,
one entry per generated token: `{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}`.
They are the log-softmax of the model's raw logits (before temperature and top_p, as vLLM reports them by
default); `token` is the token's decoded text (" Yes"). A row that ends at EOS gets an entry for the EOS token
too (its top_logprobs show what the model weighed against stopping); text cut by a `stop` string keeps the
entries of the tokens behind the cut. The full-vocabulary logits are held per generated token only for rows
that ask for logprobs (such requests form generate calls of their own), so keep their max_tokens small.

Batching: requests wait in a queue; the generation loop takes whatever arrived (up to --max-batch-size rows,
waiting at most --batch-wait-ms after the first) and runs one `generate` call for them: left-padded, each row
stopping at EOS or its own max_tokens. While a batch generates, new requests queue up and form the next one.
Requests with different sampling settings (greedy vs. temperature/top_p), or with and without logprobs, go
in separate generate calls.

It listens on loopback by default and has no authentication: it is meant for one pipeline on one host.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

logger = logging.getLogger("rlvr.judge_server")

DEFAULT_MAX_TOKENS = 256


class RequestError(Exception):
    """A request the server refuses (HTTP 4xx), with the OpenAI error type."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


@dataclass
class _Job:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    stop: list[str]
    n: int
    future: asyncio.Future
    logprobs: bool = False
    top_logprobs: int = 0
    enqueued: float = field(default_factory=time.perf_counter)

    @property
    def sampling(self) -> tuple[bool, float, float]:
        greedy = self.temperature <= 0
        return (not greedy, 0.0 if greedy else self.temperature, 1.0 if greedy else self.top_p)


@dataclass
class Completion:
    text: str
    finish_reason: str  # "stop" | "length"
    completion_tokens: int
    logprobs: list[dict[str, Any]] | None = None  # OpenAI `logprobs.content` when the request asked for it


class BatchingGenerator:
    """Owns the model; `submit` queues one request, `run` is the loop that batches and generates."""

    def __init__(self, model_path: str, device: str = "auto", dtype: str = "auto", max_batch_size: int = 16,
                 batch_wait_s: float = 0.005, threads: int | None = None) -> None:
        self.model_path = model_path
        self.threads = threads
        self.device_name = device
        self.dtype_name = dtype
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.ready = False
        self.model: Any = None
        self.tokenizer: Any = None
        self.context_length = 0
        self._queue: asyncio.Queue[_Job] | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="judge-generate")
        self._stopping = threading.Event()  # read by the stopping criterion: a running generate ends early
        # The tokenizer encodes on the event loop's thread and decodes on the generation thread; a Rust fast
        # tokenizer used from two threads at once can fail with "Already borrowed".
        self._tokenizer_lock = threading.Lock()
        self.stats: dict[str, Any] = {"requests": 0, "batches": 0, "rows": 0, "completion_tokens": 0,
                                      "prompt_tokens": 0, "generate_s": 0.0, "batch_sizes": Counter()}

    # -- set-up -------------------------------------------------------------------------------------------

    def load(self) -> None:
        """Loads tokenizer and model (blocking: call it in a thread)."""
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        transformers.utils.logging.disable_progress_bar()  # a bar per load would fill the stderr tail
        # More intra-op threads than free cores make every decode step wait on the slowest thread: on a shared
        # host a few threads beat many (measured on 2 busy cores: 1 thread 0.13 s/token, 2 threads 0.27).
        threads = self.threads or default_threads()
        torch.set_num_threads(threads)
        device = self.device_name
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.dtype_name == "auto":
            # bf16 matmuls are slow on most CPUs; a judge small enough for CPU fits in float32.
            dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        else:
            dtype = getattr(torch, self.dtype_name)
        started = time.perf_counter()
        tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=dtype).to(device)
        model.eval()
        eos = model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        self.eos_ids = sorted(eos_ids)
        self.pad_id = tokenizer.pad_token_id
        self.context_length = int(getattr(model.config, "max_position_embeddings", 0) or 2048)
        self.device = device
        self.tokenizer, self.model = tokenizer, model
        self.ready = True
        logger.info("loaded %s on %s (%s, %d CPU threads) in %.1fs; eos ids %s, context %d", self.model_path,
                    device, str(dtype).removeprefix("torch."), threads, time.perf_counter() - started, self.eos_ids,
                    self.context_length)

    def render(self, messages: list[dict[str, Any]]) -> list[int]:
        """Chat messages -> prompt token ids (the model's chat template, with the assistant turn opened)."""
        with self._tokenizer_lock:
            if self.tokenizer.chat_template:
                text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            else:
                text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    # -- serving ------------------------------------------------------------------------------------------

    async def submit(self, job_args: dict[str, Any]) -> list[Completion]:
        if self._queue is None:
            raise RuntimeError("the generation loop is not running")
        job = _Job(future=asyncio.get_running_loop().create_future(), **job_args)
        self.stats["requests"] += 1
        self.stats["prompt_tokens"] += len(job.prompt_ids) * job.n
        await self._queue.put(job)
        return await job.future

    async def run(self) -> None:
        """The batching loop: runs until cancelled."""
        self._queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            rows = batch[0].n
            deadline = loop.time() + self.batch_wait_s
            while rows < self.max_batch_size:
                try:
                    job = self._queue.get_nowait()
                except asyncio.QueueEmpty:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    try:
                        job = await asyncio.wait_for(self._queue.get(), remaining)
                    except TimeoutError:
                        break
                batch.append(job)
                rows += job.n
            batch = [job for job in batch if not job.future.done()]  # callers that went away
            groups: dict[tuple[tuple[bool, float, float], bool], list[_Job]] = {}
            for job in batch:
                groups.setdefault((job.sampling, job.logprobs), []).append(job)
            for (sampling, logprobs), jobs in groups.items():
                try:
                    results = await loop.run_in_executor(self._executor, self._generate, jobs, sampling, logprobs)
                except Exception as e:  # one failed batch fails its requests, not the server
                    logger.exception("generate failed for a batch of %d", len(jobs))
                    for job in jobs:
                        if not job.future.done():
                            job.future.set_exception(e)
                    continue
                for job, completions in zip(jobs, results):
                    if not job.future.done():
                        job.future.set_result(completions)

    def _generate(self, jobs: list[_Job], sampling: tuple[bool, float, float],
                  logprobs: bool = False) -> list[list[Completion]]:
        """One generate call for `jobs` (same sampling settings; with `logprobs`, all of them asked for logprobs
        and the raw logits of every step are kept); runs in the generation thread."""
        import torch
        from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

        rows = [(job, copy) for job in jobs for copy in range(job.n)]
        width = max(len(job.prompt_ids) for job, _ in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (job, _) in enumerate(rows):
            input_ids[i, width - len(job.prompt_ids):] = torch.tensor(job.prompt_ids)
            attention[i, width - len(job.prompt_ids):] = 1
        limits = torch.tensor([job.max_tokens for job, _ in rows], device=self.device)
        stopping = self._stopping

        class RowLimits(StoppingCriteria):
            """Each row stops at its own max_tokens; all stop at once when the server shuts down."""

            def __call__(self, ids, scores, **kwargs):
                done = (ids.shape[1] - width) >= limits
                return done | stopping.is_set()

        do_sample, temperature, top_p = sampling
        config = GenerationConfig(
            max_new_tokens=int(limits.max()), do_sample=do_sample, eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id, **({"temperature": temperature, "top_p": top_p} if do_sample else {}),
            **({"output_logits": True, "return_dict_in_generate": True} if logprobs else {}),
        )
        started = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device),
                generation_config=config, stopping_criteria=StoppingCriteriaList([RowLimits()]),
            )
            steps: list[Any] = []
            if logprobs:
                # Per step: log-softmax of the raw logits, reduced at once to what the rows need (the chosen
                # token's logprob and the top k), so that the full-vocabulary tensors can go.
                k = max(job.top_logprobs for job, _ in rows)
                sequences = out.sequences
                for step, logits in enumerate(out.logits):
                    logp = torch.log_softmax(logits.float(), dim=-1)
                    chosen = sequences[:, width + step].to(logp.device)
                    chosen_lp = logp.gather(1, chosen[:, None])[:, 0].tolist()
                    top = logp.topk(k, dim=-1) if k else None
                    steps.append((chosen_lp, top.values.tolist() if top else None,
                                  top.indices.tolist() if top else None))
                out = sequences
        elapsed = time.perf_counter() - started
        new_tokens = out[:, width:].tolist()
        results: dict[int, list[Completion]] = {}
        total = 0
        eos = set(self.eos_ids)
        for i, (job, _) in enumerate(rows):
            tokens = new_tokens[i][: job.max_tokens]
            end = next((k for k, t in enumerate(tokens) if t in eos), None)
            finish = "stop" if end is not None else "length"
            scored = tokens[: end + 1] if end is not None else tokens  # the EOS step has logprobs too
            tokens = tokens[:end] if end is not None else tokens
            with self._tokenizer_lock:
                text = self.tokenizer.decode(tokens, skip_special_tokens=True)
                entries = self._logprob_entries(i, scored, steps, job.top_logprobs) if job.logprobs else None
            for s in job.stop:
                cut = text.find(s) if s else -1
                if cut >= 0:
                    text, finish = text[:cut], "stop"
            total += len(tokens)
            results.setdefault(id(job), []).append(Completion(text, finish, len(tokens), entries))
        self.stats["batches"] += 1
        self.stats["rows"] += len(rows)
        self.stats["batch_sizes"][len(rows)] += 1
        self.stats["completion_tokens"] += total
        self.stats["generate_s"] += elapsed
        logger.debug("batch of %d rows: %d new tokens in %.2fs", len(rows), total, elapsed)
        return [results[id(job)] for job in jobs]

    def _logprob_entries(self, row: int, tokens: list[int], steps: list[Any], k: int) -> list[dict[str, Any]]:
        """OpenAI `logprobs.content` for one row (call with the tokenizer lock held)."""
        entries = []
        for step, token in enumerate(tokens):
            chosen_lp, top_values, top_indices = steps[step]
            top = []
            if k:
                top = [self._token_entry(t, lp) for t, lp in zip(top_indices[row][:k], top_values[row][:k])]
            entries.append({**self._token_entry(token, chosen_lp[row]), "top_logprobs": top})
        return entries

    def _token_entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        text = self.tokenizer.decode([token_id], skip_special_tokens=False)
        # -inf (a token the model rules out entirely) is not valid JSON: OpenAI clients get a very large negative.
        return {"token": text, "logprob": max(float(logprob), -9999.0), "bytes": list(text.encode("utf-8"))}

    def shutdown(self) -> None:
        self._stopping.set()
        self._executor.shutdown(wait=True, cancel_futures=True)


def default_threads() -> int:
    """Half the CPUs this process may use, 1 to 8: the judge shares the host with the rest of the pipeline."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus // 2))


def parse_chat_request(body: Any, generator: BatchingGenerator, served_names: set[str]) -> dict[str, Any]:
    """Validates an OpenAI chat request body; returns the _Job fields. Raises RequestError."""
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    model = body.get("model")
    if model is not None and model not in served_names:
        raise RequestError(f"The model `{model}` does not exist.", 404, "NotFoundError")
    if body.get("stream"):
        raise RequestError("stream=true is not supported by this server")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list")
    clean = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError("each message must be an object with a role and content")
        content = m.get("content")
        if isinstance(content, list):  # content parts: only text is understood
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise RequestError("message content must be a string or a list of text parts")
        clean.append({"role": m["role"], "content": content})

    def number(name: str, default: float, low: float, high: float) -> float:
        value = body.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise RequestError(f"{name} must be a number in [{low}, {high}], got {value!r}")
        return float(value)

    temperature = number("temperature", 1.0, 0.0, 2.0)
    top_p = number("top_p", 1.0, 0.0, 1.0)
    if top_p <= 0:
        raise RequestError("top_p must be > 0")
    n = int(number("n", 1, 1, 16))
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise RequestError("stop must be a string or a list of strings")
    logprobs = body.get("logprobs")
    if logprobs is None:
        logprobs = False
    if not isinstance(logprobs, bool):
        raise RequestError(f"logprobs must be true or false, got {logprobs!r}")
    top_logprobs = body.get("top_logprobs")
    if top_logprobs is not None:
        if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int) or not 0 <= top_logprobs <= 20:
            raise RequestError(f"top_logprobs must be an integer in [0, 20], got {top_logprobs!r}")
        if top_logprobs and not logprobs:
            raise RequestError("top_logprobs needs logprobs=true")
    prompt_ids = generator.render(clean)
    room = generator.context_length - len(prompt_ids)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = min(DEFAULT_MAX_TOKENS, room)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise RequestError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    if max_tokens > room:
        raise RequestError(
            f"This model's maximum context length is {generator.context_length} tokens. However, you requested "
            f"{len(prompt_ids) + max_tokens} tokens ({len(prompt_ids)} in the messages, {max_tokens} in the "
            f"completion). Please reduce the length of the messages or completion."
        )
    return {"prompt_ids": prompt_ids, "max_tokens": max_tokens, "temperature": temperature, "top_p": top_p,
            "stop": stop, "n": n, "logprobs": logprobs, "top_logprobs": top_logprobs or 0}


def build_app(generator: BatchingGenerator, served_model_name: str) -> web.Application:
    served_names = {served_model_name, generator.model_path}
    created = int(time.time())

    def error(message: str, status: int, kind: str) -> web.Response:
        return web.json_response({"error": {"message": message, "type": kind, "param": None, "code": status}},
                                 status=status)

    async def health(request: web.Request) -> web.Response:
        if not generator.ready:
            return web.json_response({"status": "loading"}, status=503)
        return web.json_response({"status": "ok"})

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": served_model_name, "object": "model", "created": created, "owned_by": "rlvr",
             "root": generator.model_path, "max_model_len": generator.context_length}]})

    async def stats(request: web.Request) -> web.Response:
        out = dict(generator.stats)
        out["batch_sizes"] = {str(k): v for k, v in sorted(out["batch_sizes"].items())}
        return web.json_response(out)

    async def chat(request: web.Request) -> web.Response:
        if not generator.ready:
            return error("the model is still loading", 503, "service_unavailable")
        try:
            body = await request.json()
        except ValueError:
            return error("the body is not valid JSON", 400, "invalid_request_error")
        try:
            job = parse_chat_request(body, generator, served_names)
        except RequestError as e:
            return error(str(e), e.status, e.kind)
        try:
            completions = await generator.submit(job)
        except Exception as e:
            return error(f"generation failed: {type(e).__name__}: {e}", 500, "internal_server_error")
        completion_tokens = sum(c.completion_tokens for c in completions)
        prompt_tokens = len(job["prompt_ids"])
        return web.json_response({
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": served_model_name,
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": c.text},
                 "logprobs": None if c.logprobs is None else {"content": c.logprobs},
                 "finish_reason": c.finish_reason}
                for i, c in enumerate(completions)
            ],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        })

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/stats", stats)
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def serve(args: argparse.Namespace) -> int:
    generator = BatchingGenerator(args.model, args.device, args.dtype, args.max_batch_size,
                                  args.batch_wait_ms / 1000, args.threads)
    app = build_app(generator, args.served_model_name)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    site = web.SockSite(runner, sock)
    await site.start()
    port = sock.getsockname()[1]
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"http://{host}:{port}/v1", flush=True)  # the first stdout line: the launcher reads it

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    background = [asyncio.create_task(generator.run())]  # referenced here: the loop keeps only weak ones
    if args.exit_with_parent:
        background.append(asyncio.create_task(_exit_with_parent(os.getppid(), stop)))
    code = 0
    try:
        load = loop.run_in_executor(None, generator.load)
        done, _ = await asyncio.wait({load, asyncio.ensure_future(stop.wait())},
                                     return_when=asyncio.FIRST_COMPLETED)
        if load in done and load.exception() is not None:
            error = load.exception()
            logger.error("cannot load the judge model from %s: %s: %s", args.model, type(error).__name__, error)
            code = 1
        else:
            await stop.wait()
    finally:
        logger.info("shutting down")
        generator._stopping.set()
        await runner.cleanup()
        for task in background:
            task.cancel()
        await loop.run_in_executor(None, generator.shutdown)
    return code


async def _exit_with_parent(parent: int, stop: asyncio.Event) -> None:
    """Stops the server once the process that started it is gone (this process is then re-parented): a
    pipeline killed with SIGKILL cannot stop its judge, and the judge runs in a process group of its own."""
    while os.getppid() == parent:
        await asyncio.sleep(1.0)
    logger.warning("the parent process %d is gone: stopping", parent)
    stop.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlvr.judge_server",
                                     description="OpenAI-compatible chat server on transformers (the local judge).")
    parser.add_argument("--model", required=True, help="a local Hugging Face model directory")
    parser.add_argument("--host", default="127.0.0.1", help="default loopback: there is no authentication")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (the URL is printed)")
    parser.add_argument("--served-model-name", default="judge")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--dtype", default="auto", help="auto (cuda: bfloat16, cpu: float32) | float32 | bfloat16")
    parser.add_argument("--max-batch-size", type=int, default=16, help="rows per generate call")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0,
                        help="after the first queued request, wait this long for more to batch with it")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: half the CPUs, 1 to 8)")
    parser.add_argument("--exit-with-parent", action="store_true",
                        help="stop when the process that started this one exits (start_judge_server sets it)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    code = asyncio.run(serve(args))
    # The socket is closed and no request is in flight: skip the interpreter's teardown of torch and
    # transformers, which takes seconds on a busy host and would only delay stop().
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
