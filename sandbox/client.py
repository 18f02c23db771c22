"""Clients of the sandbox: one interface, `await client.run(RunRequest) -> RunResult`, over HTTP or in-process.

    url, stop = start_local_server(max_parallel=4)     # a `python -m sandbox.server` child on loopback
    client = HTTPSandboxClient(url, timeout_s=60)
    result = await client.run(RunRequest("python", "print(1)"))
    stop()

    client = LocalSandboxClient(max_parallel=2)         # the same, without a server process

A failing program is a RunResult with a status; an unreachable or failing server raises SandboxConnectionError;
a request the server rejects raises ValueError with its message.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

from sandbox.types import RunRequest, RunResult

_REPO_ROOT = str(Path(__file__).resolve().parents[1])


class SandboxConnectionError(ConnectionError):
    """The sandbox service could not be reached, or failed (5xx): worth retrying."""


@runtime_checkable
class SandboxClient(Protocol):
    async def run(self, request: RunRequest) -> RunResult: ...


class LocalSandboxClient:
    """Runs requests in this process through a backend (bubblewrap by default)."""

    def __init__(self, max_parallel: int = 2, backend=None) -> None:
        if backend is None:
            from sandbox.bwrap_backend import BwrapBackend

            backend = BwrapBackend(max_parallel=max_parallel)
        self.backend = backend

    async def run(self, request: RunRequest) -> RunResult:
        return await self.backend.run(request)

    def available(self) -> tuple[bool, str]:
        return self.backend.available()

    async def aclose(self) -> None:
        pass


class HTTPSandboxClient:
    """Talks to `python -m sandbox.server`. A session per call: callers may come from different event loops
    (a reward worker's evaluate under asyncio.run, a Ray actor's loop), and a session belongs to one."""

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    async def run(self, request: RunRequest) -> RunResult:
        status, body = await self._call("POST", "/run", request.to_dict())
        if status == 400:
            raise ValueError(f"sandbox rejected the request: {body.get('error', body)}")
        if status != 200:
            raise SandboxConnectionError(f"sandbox server answered HTTP {status}: {str(body)[:300]}")
        return RunResult.from_dict(body)

    async def health(self) -> dict:
        status, body = await self._call("GET", "/health", None)
        if status != 200:
            raise SandboxConnectionError(f"sandbox server answered HTTP {status}: {str(body)[:300]}")
        return body

    async def _call(self, method: str, path: str, payload: dict | None) -> tuple[int, dict]:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                async with session.request(method, self.url + path, json=payload) as response:
                    text = await response.text()
                    try:
                        body = json.loads(text)
                    except ValueError:
                        body = {"error": text[:500]}
                    return response.status, body
        except aiohttp.ClientError as e:
            raise SandboxConnectionError(f"sandbox server at {self.url} unreachable: {type(e).__name__}: {e}") from e

    async def aclose(self) -> None:
        pass


class LocalSandboxServer:
    """A `python -m sandbox.server` child on loopback, owned by this process: `start()` waits until /health
    answers; `alive()`; `stop()`. The server also exits by itself when this process dies (it watches its stdin).

    With `max_restarts` > 0 it is supervised: a thread starts it again when it dies (same port if still free, else
    a new one, passed to `on_restart(url)`), at most `max_restarts` times; `ensure_running()` does the same at
    once, for a caller that just found it gone."""

    def __init__(self, max_parallel: int = 2, host: str = "127.0.0.1", startup_timeout_s: float = 30.0,
                 backend: str = "bwrap", max_restarts: int = 0,
                 on_restart: Callable[[str], None] | None = None) -> None:
        self.max_parallel, self.host, self.backend = max_parallel, host, backend
        self.startup_timeout_s = startup_timeout_s
        self.max_restarts, self.on_restart = max_restarts, on_restart
        self.url = ""
        self.restarts = 0
        self.proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> str:
        with self._lock:
            url = self._spawn(0)
        if self.max_restarts > 0:
            threading.Thread(target=self._watch, daemon=True, name="sandbox-server-watch").start()
        return url

    def ensure_running(self) -> bool:
        """Starts the server again if it died (restarts left); True when it serves."""
        with self._lock:
            if self._closed.is_set():
                return False
            if self.alive():
                return True
            if self.restarts >= self.max_restarts:
                return False
            port = int(self.url.rsplit(":", 1)[1]) if self.url else 0
            self._terminate()
            try:
                url = self._spawn(port)
            except RuntimeError:  # the old port was taken meanwhile
                url = self._spawn(0)
            self.restarts += 1
        if self.on_restart is not None:
            self.on_restart(url)
        return True

    def stop(self) -> None:
        self._closed.set()
        with self._lock:
            self._terminate()

    def _watch(self) -> None:
        while not self._closed.wait(0.2):
            if self.proc is not None and self.proc.poll() is not None:
                try:
                    if not self.ensure_running():
                        return  # out of restarts (or stopped): callers see the connection errors
                except Exception:  # noqa: BLE001 - a failed restart is retried at the next look
                    time.sleep(1.0)

    def _spawn(self, port: int) -> str:
        env = dict(os.environ)
        env["PYTHONPATH"] = _REPO_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        proc = self.proc = subprocess.Popen(
            [sys.executable, "-m", "sandbox.server", "--host", self.host, "--port", str(port), "--max-parallel",
             str(self.max_parallel), "--backend", self.backend, "--exit-on-stdin-eof"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
        )
        # Drained in the background: a full stderr pipe would block the server. Each line is also passed on to this
        # process's stderr, where the server's warnings and errors are seen (in a Ray worker: its log and console).
        stderr_tail: deque[str] = deque(maxlen=50)

        def drain() -> None:
            for line in proc.stderr:
                stderr_tail.append(line)
                sys.stderr.write(line)

        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + self.startup_timeout_s
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
            self._terminate()
            time.sleep(0.1)
            raise RuntimeError(f"sandbox server did not start: "
                               f"{''.join(stderr_tail).strip()[-1000:] or 'no URL printed'}")
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    if response.status == 200:
                        self.url = url
                        return url
            except (urllib.error.URLError, OSError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                self._terminate()
                raise RuntimeError(f"sandbox server at {url} did not become healthy in {self.startup_timeout_s}s")
            time.sleep(0.05)

    def _terminate(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


def start_local_server(
    max_parallel: int = 2, host: str = "127.0.0.1", startup_timeout_s: float = 30.0, backend: str = "bwrap"
) -> tuple[str, Callable[[], None]]:
    """Starts `python -m sandbox.server` as a child process, waits until /health answers, and returns
    (url, stop). The server also exits by itself when this process dies (it watches its stdin)."""
    server = LocalSandboxServer(max_parallel, host, startup_timeout_s, backend)
    return server.start(), server.stop
