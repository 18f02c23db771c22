"""Reward throughput, side by side: math verification by process-pool size, sandbox runs by parallelism, LLM-judge
requests by concurrency cap.

    .venv/bin/python bench/rewards.py [--reps 3] [--math-n 180] [--sandbox-n 24] [--judge-waves 8] [--judge-delay 0.2]

  math     MathRuleRewardWorker (math-verify in its KillableProcessPool) on a mix of realistic responses (boxed
           answers, <think> blocks, fractions, radicals, thousands separators, polynomials, intervals, wrong
           answers, no answer, last-number fallback), `pool_size` 1 / 2 / 4; all samples submitted at once.
  sandbox  small real Python programs (stdin/stdout, loops, sorting, a crash) through the HTTP sandbox service
           (`python -m sandbox.server`, bubblewrap + rlimits + seccomp), `--max-parallel` 1 / 2 / 4; the client
           keeps twice that many requests in flight.
  judge    LLMJudgeRewardWorker against an OpenAI-compatible stand-in server on loopback (a child process of this
           script, aiohttp) that answers YES/NO after a fixed delay per request; `max_concurrency` 4 / 16 / 64,
           `waves` x max_concurrency distinct requests (no cache hits). The ideal is max_concurrency / delay.

Printed (one table): the figure per variant, median over reps with [min, max], its ratio to the first variant of
its section, and the peak number in flight: sandbox, bubblewrap sandboxes alive at once (sampled every 20 ms);
judge, the worker's `in_flight_peak` (the server's own count is in the notes); math, none (every sample is
submitted at once and waits for a pool process, so pool_size is the number running).
Warm-up (pool workers' math-verify import, server start) is outside the timed part. The machine's load average is
printed before and after: on a shared machine the ratios hold, absolute figures do not carry between runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlvr.data.types import Prompt, Sample  # noqa: E402
from rlvr.workers.rewards.base import RewardLimits  # noqa: E402

# -- math -----------------------------------------------------------------------------------------------------


def math_mix(n: int, seed: int) -> list[tuple[str, str]]:
    """(response, ground truth) pairs, cycling through the kinds a policy produces; numbers vary per item."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        kind = i % 12
        if kind == 0:
            out.append((f"<think>{a} plus {b}... carry the one.</think> The answer is \\boxed{{{a + b}}}.", str(a + b)))
        elif kind == 1:
            out.append((f"We divide: \\boxed{{\\frac{{{a}}}{{{2 * a}}}}}", "0.5"))
        elif kind == 2:
            out.append((f"So $x = {a}\\sqrt{{3}}$, i.e. \\boxed{{{a}\\sqrt{{3}}}}", f"{a}\\sqrt{{3}}"))
        elif kind == 3:
            out.append((f"In total there are {a},{b:03d} apples.", str(a * 1000 + b)))
        elif kind == 4:
            out.append((f"\\boxed{{\\dfrac{{{a}}}{{{a + b}}}}}", f"$\\frac{{{a}}}{{{a + b}}}$"))
        elif kind == 5:
            out.append((f"Expanding, \\boxed{{x^2 + {2 * a}x + {a * a}}}", f"(x+{a})^2"))
        elif kind == 6:
            out.append((f"<think>maybe {a}?</think> I get \\boxed{{{a * b + 1}}}.", str(a * b)))  # wrong
        elif kind == 7:
            out.append(("I am not sure how to solve this problem.", str(a)))  # no answer: no math-verify call
        elif kind == 8:
            steps = " ".join(f"Step {k}: {a} + {k} = {a + k}." for k in range(1, 6))
            out.append((f"{steps} So the result is {a + b}", str(a + b)))  # last-number fallback
        elif kind == 9:
            out.append((f"The solution set is \\boxed{{[{a}, {a + b})}}", f"[{a},{a + b})"))
        elif kind == 10:
            out.append((f"\\boxed{{x = {a}}}", str(a)))
        else:
            out.append((f"The probability is \\boxed{{{a}\\%}}", f"{a / 100}"))
    return out


def sample(text: str, truth: str, i: int, domain: str = "math", question: str = "q") -> Sample:
    prompt = Prompt(uid=f"p{i}", domain=domain, ground_truth=truth,
                    messages=[{"role": "user", "content": question}])
    return Sample(prompt=prompt, group_id=f"g{i}", index=0, response_ids=[], response_text=text,
                  finish_reason="stop", policy_version=0)


async def bench_math(pool_size: int, reps: int, n: int) -> list[dict]:
    from rlvr.workers.rewards.math_rule import MathRuleRewardWorker

    worker = MathRuleRewardWorker("math", RewardLimits(max_concurrency=256, timeout_s=60), pool_size=pool_size,
                                  verify_timeout_s=10.0)
    try:
        # Warm-up: every pool worker imports math-verify and sympy (about a second each) before the clock runs.
        warm = [sample(t, g, i) for i, (t, g) in enumerate(math_mix(4 * pool_size, 99))]
        await asyncio.gather(*(worker.evaluate(s) for s in warm))
        out = []
        for rep in range(reps):
            samples = [sample(t, g, i) for i, (t, g) in enumerate(math_mix(n, rep))]
            start = time.perf_counter()
            results = await asyncio.gather(*(worker.evaluate(s) for s in samples))
            elapsed = time.perf_counter() - start
            out.append({"rate": n / elapsed, "peak": None,  # all n are in flight, queued on the pool
                        "ok": sum(r.status == "ok" for r in results),
                        "correct": sum(bool(r.correct) for r in results), "n": n})
        return out
    finally:
        worker.close()


# -- sandbox --------------------------------------------------------------------------------------------------

PROGRAMS = [
    ("print(input()[::-1])", "hello sandbox", "ok"),
    ("n = int(input())\nprint(sum(i * i for i in range(n)))", "20000", "ok"),
    ("xs = list(map(int, input().split()))\nprint(*sorted(xs))",
     " ".join(str((i * 7919) % 1000) for i in range(300)), "ok"),
    ("import json, sys\nd = json.loads(sys.stdin.read())\nprint(d['a'] + d['b'])", '{"a": 2, "b": 3}', "ok"),
    ("def f(n):\n    return 1 if n < 2 else n * f(n - 1)\nprint(f(200) % 1000007)", "", "ok"),
    ("raise ValueError('wrong answer path')", "", "runtime_error"),
]


async def bench_sandbox(parallel: int, reps: int, n: int) -> list[dict]:
    from sandbox.client import HTTPSandboxClient, start_local_server
    from sandbox.types import RunRequest

    url, stop = start_local_server(max_parallel=parallel)
    try:
        client = HTTPSandboxClient(url, timeout_s=120)
        health = await client.health()
        if health.get("backend") != "bwrap":
            raise RuntimeError(f"sandbox server is not on bubblewrap: {health}")
        gate = asyncio.Semaphore(2 * parallel)  # keep the server's queue full without flooding it

        async def one(i: int) -> bool:
            code, stdin, expected = PROGRAMS[i % len(PROGRAMS)]
            async with gate:
                result = await client.run(RunRequest("python", code, stdin=stdin))
            return result.status == expected

        async def running_peak(done: asyncio.Event) -> int:
            """Sandboxes alive at once, polled every 20 ms (the server's own in_flight counts requests queued for
            a slot too)."""
            peak = 0
            while not done.is_set():
                peak = max(peak, await asyncio.to_thread(_count_sandboxes))
                await asyncio.sleep(0.02)
            return peak

        await asyncio.gather(*(one(i) for i in range(parallel)))  # warm-up: first bwrap start, page cache
        out = []
        for _ in range(reps):
            done = asyncio.Event()
            poller = asyncio.create_task(running_peak(done))
            start = time.perf_counter()
            as_expected = await asyncio.gather(*(one(i) for i in range(n)))
            elapsed = time.perf_counter() - start
            done.set()
            out.append({"rate": n / elapsed, "peak": await poller, "ok": sum(as_expected), "n": n})
        return out
    finally:
        stop()


def _count_sandboxes() -> int:
    """The sandbox server's live bubblewrap children (one per run: prlimit execs bwrap, which the backend waits
    for before it frees the run's slot)."""
    import psutil

    count = 0
    for server in psutil.Process().children():
        try:
            if "sandbox.server" not in " ".join(server.cmdline()):
                continue
            for proc in server.children():
                if proc.name() == "bwrap" and proc.status() != psutil.STATUS_ZOMBIE:
                    count += 1
        except psutil.Error:  # it ended while we looked
            pass
    return count


# -- judge ----------------------------------------------------------------------------------------------------


def serve_stand_in(delay_s: float) -> None:
    """The stand-in judge (run as `bench/rewards.py --serve-judge DELAY`): OpenAI chat completions on loopback,
    YES when the response mentions the reference, else NO, after `delay_s`; GET /stats gives the request count
    and the peak handled at once, POST /stats/reset clears them. Prints its URL first; exits on stdin EOF."""
    from aiohttp import web

    stats = {"requests": 0, "active": 0, "peak": 0}

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        stats["requests"] += 1
        stats["active"] += 1
        stats["peak"] = max(stats["peak"], stats["active"])
        try:
            await asyncio.sleep(delay_s)
        finally:
            stats["active"] -= 1
        prompt = body["messages"][-1]["content"]
        verdict = "YES" if "#yes" in prompt else "NO"
        return web.json_response({
            "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": verdict}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    async def get_stats(request: web.Request) -> web.Response:
        return web.json_response(stats)

    async def reset(request: web.Request) -> web.Response:
        stats.update(requests=0, peak=stats["active"])
        return web.json_response(stats)

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_get("/stats", get_stats)
        app.router.add_post("/stats/reset", reset)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        print(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until our parent goes away
        await runner.cleanup()

    asyncio.run(main())


async def _http(method: str, url: str) -> dict:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.request(method, url) as response:
            return await response.json()


async def bench_judge(url: str, concurrency: int, reps: int, waves: int) -> list[dict]:
    from rlvr.workers.rewards.llm_judge import LLMJudgeRewardWorker

    worker = LLMJudgeRewardWorker("judge", RewardLimits(max_concurrency=concurrency, timeout_s=60, max_retries=0),
                                  base_url=url + "/v1", api_key_env=None, cache_size=0, request_timeout_s=60)
    n = waves * concurrency
    try:
        # Warm-up: the HTTP client and its connections (one per concurrent request).
        await asyncio.gather(*(worker.evaluate(sample(f"warm #{i}", "x", i, "judge")) for i in range(concurrency)))
        out = []
        for rep in range(reps):
            # Distinct requests: identical ones would be answered from the cache or share one call.
            samples = [sample(f"rep {rep} item {i}: answer {'#yes' if i % 2 else 'no'}", str(i), i, "judge",
                              question=f"question {rep}-{i}") for i in range(n)]
            await _http("POST", url + "/stats/reset")
            worker.reset_metrics()
            start = time.perf_counter()
            results = await asyncio.gather(*(worker.evaluate(s) for s in samples))
            elapsed = time.perf_counter() - start
            server = await _http("GET", url + "/stats")
            m = worker.metrics()
            expected_ok = all(r.status == "ok" and r.correct == bool(i % 2) for i, r in enumerate(results))
            out.append({"rate": n / elapsed, "peak": m["in_flight_peak"], "server_peak": server["peak"],
                        "server_requests": server["requests"], "ok": sum(r.status == "ok" for r in results),
                        "n": n, "as_expected": expected_ok, "p50": m["latency/p50"]})
        return out
    finally:
        worker.close()


def start_stand_in(delay_s: float) -> tuple[str, subprocess.Popen]:
    proc = subprocess.Popen([sys.executable, __file__, "--serve-judge", str(delay_s)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        proc.kill()
        raise RuntimeError("the stand-in judge server did not start")
    return url, proc


# -- table ----------------------------------------------------------------------------------------------------


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def cell(values: list[float], fmt: str = ".1f") -> str:
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}, {max(values):{fmt}}]"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--math-n", type=int, default=180, help="samples per rep")
    parser.add_argument("--math-pools", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--sandbox-n", type=int, default=24, help="runs per rep")
    parser.add_argument("--sandbox-parallel", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--judge-concurrency", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--judge-waves", type=int, default=8, help="requests per rep = waves x max_concurrency")
    parser.add_argument("--judge-delay", type=float, default=0.2, help="stand-in server latency per request, s")
    parser.add_argument("--serve-judge", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_judge is not None:
        serve_stand_in(args.serve_judge)
        return

    load_before = load()
    t0 = time.perf_counter()
    rows: list[tuple[str, str, list[dict], str]] = []  # section, variant, per-rep results, note

    for size in args.math_pools:
        r = asyncio.run(bench_math(size, args.reps, args.math_n))
        rows.append(("math verifications/s", f"pool_size={size}", r,
                     f"{r[0]['n']} samples/rep, {r[0]['ok']} ok, {r[0]['correct']} correct"))
    for parallel in args.sandbox_parallel:
        r = asyncio.run(bench_sandbox(parallel, args.reps, args.sandbox_n))
        rows.append(("sandbox runs/s (bwrap, HTTP)", f"max_parallel={parallel}", r,
                     f"{r[0]['n']} runs/rep, {min(x['ok'] for x in r)} with the expected status (min over reps)"))
    url, server = start_stand_in(args.judge_delay)
    try:
        for c in args.judge_concurrency:
            r = asyncio.run(bench_judge(url, c, args.reps, args.judge_waves))
            ideal = c / args.judge_delay
            server_peak = cell([x["server_peak"] for x in r], ".0f")
            rows.append(("judge requests/s", f"max_concurrency={c}", r,
                         f"ideal {ideal:.0f}/s; server peak {server_peak}; {r[0]['n']} req/rep, "
                         f"{min(x['server_requests'] for x in r)} reached the server, "
                         f"verdicts {'all' if all(x['as_expected'] for x in r) else 'NOT all'} as expected; "
                         f"latency p50 {statistics.median(x['p50'] for x in r):.3f}s"))
    finally:
        server.stdin.close()
        server.wait(10)
    elapsed = time.perf_counter() - t0

    print(f"\nreward throughput: {args.reps} reps per variant, median [min, max]; machine {platform.machine()}, "
          f"{os.cpu_count()} CPUs, python {platform.python_version()}; load average (1/5/15 min) "
          f"{load_before} before, {load()} after; {elapsed:.0f}s in all")
    print("| reward | variant | per second | vs first | peak in flight | notes |")
    print("|---|---|---|---|---|---|")
    firsts: dict[str, float] = {}
    for section, variant, r, note in rows:
        rate = statistics.median(x["rate"] for x in r)
        base = firsts.setdefault(section, rate)
        peak = "-" if r[0]["peak"] is None else cell([x["peak"] for x in r], ".0f")
        print(f"| {section} | {variant} | {cell([x['rate'] for x in r])} | {rate / base:.2f}x | {peak} | {note} |")


if __name__ == "__main__":
    main()
