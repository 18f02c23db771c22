"""The sandbox as an HTTP service on loopback (aiohttp).

    python -m sandbox.server --port 0 --max-parallel 4     # prints the bound URL on its first stdout line

    POST /run     JSON RunRequest -> 200 JSON RunResult (a program's failure is a status, not an HTTP error);
                  400 {"error": ...} for a request that is not valid JSON or not a valid RunRequest, or asks for
                  limits above the server's maximum
    GET  /health  200 {"status": "ok", "backend": ..., "max_parallel": N, "in_flight": n}

It has no authentication: bind it to loopback (the default) or a private network only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import socket
import sys

from aiohttp import web

from sandbox.types import RunRequest

logger = logging.getLogger("sandbox.server")
MAX_REQUEST_BYTES = 64 * 1024 * 1024


def make_backend(name: str, max_parallel: int):
    if name == "bwrap":
        from sandbox.bwrap_backend import BwrapBackend

        return BwrapBackend(max_parallel=max_parallel)
    if name == "docker":
        from sandbox.docker_backend import DockerBackend

        return DockerBackend(max_parallel=max_parallel)
    raise ValueError(f"unknown backend {name!r} (bwrap or docker)")


def make_app(backend) -> web.Application:
    app = web.Application(client_max_size=MAX_REQUEST_BYTES)
    state = {"in_flight": 0}

    async def run(request: web.Request) -> web.Response:
        try:
            data = json.loads(await request.read())
        except (ValueError, UnicodeDecodeError) as e:
            return _error(f"body is not valid JSON: {e}")
        try:
            run_request = RunRequest.from_dict(data)
            run_request.limits.check_within(backend.max_limits)
        except (ValueError, TypeError) as e:
            return _error(str(e))
        state["in_flight"] += 1
        try:
            result = await backend.run(run_request)
        finally:
            state["in_flight"] -= 1
        return web.json_response(result.to_dict())

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "backend": backend.name, "max_parallel": backend.max_parallel,
                                  "in_flight": state["in_flight"]})

    app.router.add_post("/run", run)
    app.router.add_get("/health", health)
    return app


def _error(message: str) -> web.Response:
    return web.json_response({"error": message[:2000]}, status=400)


async def serve(host: str, port: int, backend, exit_on_stdin_eof: bool = False) -> None:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    runner = web.AppRunner(make_app(backend), access_log=None)
    await runner.setup()
    site = web.SockSite(runner, sock)
    await site.start()
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    print(f"http://{shown}:{bound_port}", flush=True)
    stop = asyncio.Event()
    if exit_on_stdin_eof:
        # The launching process holds our stdin: when it dies (however it dies) we see EOF and leave.
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

        async def watch_stdin() -> None:
            while await reader.read(4096):
                pass
            stop.set()

        asyncio.create_task(watch_stdin())
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=0, help="port (0: any free port; the URL is printed)")
    parser.add_argument("--max-parallel", type=int, default=2, help="programs running at once")
    parser.add_argument("--backend", default="bwrap", choices=("bwrap", "docker"))
    parser.add_argument("--exit-on-stdin-eof", action="store_true", help="exit when stdin closes")
    args = parser.parse_args(argv)
    # "LEVEL logger: message", the format rlvr's console sorts worker output by (errors reach the console)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    backend = make_backend(args.backend, args.max_parallel)
    ok, reason = backend.available()
    if not ok:
        print(f"sandbox backend {args.backend} is not available: {reason}", file=sys.stderr, flush=True)
        return 2
    try:
        asyncio.run(serve(args.host, args.port, backend, args.exit_on_stdin_eof))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
