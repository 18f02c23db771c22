"""A stand-in for an OpenAI-compatible judge under load (not a real judge: named as such), run as its own process:

    python -m tests.helpers.judge_standin --error-rate 0.05 --max-latency-s 0.5 --seed 0   # prints its URL

Each chat request waits a random latency, then answers "YES" or, with probability `error-rate`, HTTP 500. It
records the outcome of every request under the marker `sample-<n>` found in the request (GET /stats), and the
peak number of requests it held at once, so a test can account for every request.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import socket
import sys
import threading
from collections import defaultdict

from aiohttp import web

MARKER = re.compile(r"sample-\d+")


def make_app(error_rate: float, max_latency_s: float, seed: int) -> web.Application:
    rng = random.Random(seed)
    outcomes: dict[str, list[str]] = defaultdict(list)
    state = {"active": 0, "peak": 0}

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        marker = MARKER.search(str(body.get("messages")))
        key = marker.group(0) if marker else "unmarked"
        state["active"] += 1
        state["peak"] = max(state["peak"], state["active"])
        try:
            await asyncio.sleep(rng.random() * max_latency_s)
            if rng.random() < error_rate:
                outcomes[key].append("error")
                return web.json_response({"error": {"message": "injected failure"}}, status=500)
            outcomes[key].append("ok")
            return web.json_response({
                "id": "x", "object": "chat.completion", "created": 0, "model": body.get("model", "judge"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "YES"}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
        finally:
            state["active"] -= 1

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({"outcomes": outcomes, "peak_in_flight": state["peak"]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/stats", stats)
    return app


async def serve(args: argparse.Namespace) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    runner = web.AppRunner(make_app(args.error_rate, args.max_latency_s, args.seed), access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock, backlog=4096).start()
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    loop, stop = asyncio.get_running_loop(), asyncio.Event()
    # Serves until the parent closes our stdin (or dies): read in a thread, the loop keeps serving meanwhile.
    threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set)), daemon=True).start()
    await stop.wait()
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--error-rate", type=float, default=0.05)
    parser.add_argument("--max-latency-s", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
