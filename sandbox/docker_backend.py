"""The same backend interface as BwrapBackend, through a Docker engine (the `docker` Python SDK, imported
lazily). For hosts where a Docker engine is the sanctioned isolation (or where user namespaces are off).

One container per run, from an image with Python 3 and gcc/g++ (default `python:3.11`, whose Debian base has
both): no network (`network_mode=none`), read-only root, size-capped tmpfs on /tmp, a cgroup memory limit
(memory_mb, no swap) and pid limit (max_processes) for the whole container, all capabilities dropped but the
few the supervisor needs to hand the program an unprivileged uid (SETUID/SETGID/CHOWN/KILL),
no-new-privileges, `init=True` (a reaper as pid 1). The supervisor (sandbox/_supervisor.py) runs as root inside,
gets its instructions on stdin, runs compiler and program as uid 65534 under the same rlimits as with
bubblewrap, and reports on stderr behind a nonce the program never sees (it runs as another uid and the
instructions never touch the file system).

Untested in CI here (no Docker engine on the machines this was written on); `available()` says why it cannot
run. The output cap is applied while streaming the container's output, like the bubblewrap backend's.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import threading
import time
from typing import Any

from sandbox.bwrap_backend import DEFAULT_MAX_LIMITS, SANDBOX_ENV, SUPERVISOR_SOURCE, CompileLimits, classify
from sandbox.loops import CrossLoopLimiter
from sandbox.types import Limits, RunRequest, RunResult

_STDERR_MARK = "@@sandbox-supervisor"
_COMPILERS = {
    "c": ["/usr/bin/gcc", "-std=gnu17", "-O2", "-pipe", "-o", "prog", "main.c", "-lm"],
    "cpp": ["/usr/bin/g++", "-std=gnu++17", "-O2", "-pipe", "-o", "prog", "main.cpp"],
}
_NOBODY = 65534


class DockerBackend:
    name = "docker"

    def __init__(
        self,
        max_parallel: int = 2,
        image: str = "python:3.11",
        python: str = "/usr/local/bin/python3",
        max_limits: Limits | None = None,
        compile_limits: CompileLimits | None = None,
    ) -> None:
        self.max_parallel = max_parallel
        self.image = image
        self.python = python
        self.max_limits = max_limits or DEFAULT_MAX_LIMITS
        self.compile_limits = compile_limits or CompileLimits()
        self._limiter = CrossLoopLimiter(max_parallel)
        self._client = None
        self._checked: tuple[bool, str] | None = None

    def available(self) -> tuple[bool, str]:
        if self._checked is None:
            self._checked = self._check()
        return self._checked

    def _check(self) -> tuple[bool, str]:
        try:
            import docker
        except ImportError:
            return False, "the docker Python SDK is not installed (pip install docker)"
        try:
            client = docker.from_env()
            client.ping()
        except Exception as e:  # noqa: BLE001 - any failure means: no engine here
            return False, f"no Docker engine reachable: {type(e).__name__}: {e}"[:300]
        try:
            client.images.get(self.image)
        except Exception:  # noqa: BLE001
            return False, f"image {self.image!r} is not present (docker pull {self.image})"
        self._client = client
        return True, ""

    async def run(self, request: RunRequest) -> RunResult:
        request.validate()
        request.limits.check_within(self.max_limits)
        ok, reason = self.available()
        if not ok:
            return RunResult("sandbox_error", stderr=reason)
        async with self._limiter:
            return await asyncio.to_thread(self._run_blocking, request)

    def _run_blocking(self, request: RunRequest) -> RunResult:
        import docker

        start = time.monotonic()
        limits = request.limits
        nonce = secrets.token_hex(16)
        compiled = request.language in _COMPILERS
        bundle: dict[str, Any] = {
            "language": request.language, "code": request.code, "stdin": request.stdin, "files": request.files,
            "limits": limits.to_dict(), "python": self.python, "report_nonce": nonce,
        }
        if compiled:
            bundle["compile"] = dict(self.compile_limits.to_dict(), argv=_COMPILERS[request.language])
        tmp_bytes = max(64 * 1024 * 1024, 4 * limits.max_file_bytes)
        memory = max(limits.memory_mb, self.compile_limits.memory_mb if compiled else 0) + 128
        # The supervisor's source travels in its command line (base64 would be longer; it is plain ASCII).
        command = [self.python, "-I", "-S", "-B", "-c", SUPERVISOR_SOURCE.read_text(), "--bundle-stdin", "1",
                   "--run-uid", str(_NOBODY), "--run-gid", str(_NOBODY)]
        container = self._client.containers.create(
            self.image, command=command, user="0", working_dir="/tmp", environment=dict(SANDBOX_ENV),
            network_mode="none", read_only=True, tmpfs={"/tmp": f"size={tmp_bytes},mode=1777",
                                                        "/dev/shm": "size=16m,mode=1777"},
            mem_limit=f"{memory}m", memswap_limit=f"{memory}m", pids_limit=limits.max_processes + 4,
            cap_drop=["ALL"], cap_add=["SETUID", "SETGID", "CHOWN", "KILL"], security_opt=["no-new-privileges"],
            ulimits=[docker.types.Ulimit(name="fsize", soft=limits.max_file_bytes, hard=limits.max_file_bytes),
                     docker.types.Ulimit(name="core", soft=0, hard=0)],
            init=True, stdin_open=True, stdin_once=True, detach=True, hostname="sandbox",
        )
        killed_by_host = None
        stdout, stderr = bytearray(), bytearray()
        try:
            sock = container.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            raw = getattr(sock, "_sock", sock)
            container.start()
            raw.sendall(json.dumps(bundle).encode())
            raw.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + 15 + limits.wall_time_s + (self.compile_limits.wall_s if compiled else 0)
            timer = threading.Timer(max(0.0, deadline - time.monotonic()), container.kill)
            timer.start()
            try:
                killed_by_host = _read_multiplexed(raw, stdout, stderr, limits.max_output_bytes,
                                                   on_overflow=container.kill)
            finally:
                timer.cancel()
            if killed_by_host is None and time.monotonic() >= deadline:
                killed_by_host = "wall"
            container.wait(timeout=30)
            container.reload()
            oom = bool(container.attrs.get("State", {}).get("OOMKilled"))
        except Exception as e:  # noqa: BLE001 - the engine failed us, not the program
            return RunResult("sandbox_error", stderr=f"docker: {type(e).__name__}: {e}"[:2000],
                             duration_s=time.monotonic() - start)
        finally:
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001
                pass
        events, program_stderr = _split_reports(stderr.decode(errors="replace"), nonce)
        status, exit_code, note = classify(events, killed_by_host, program_stderr, limits, compiled)
        if oom and status in ("runtime_error", "sandbox_error"):
            status, note = "memory_limit", f"the container passed {memory} MB: killed"
        if status == "compile_error":
            program_stderr = events.get("compiled", {}).get("output", "") or program_stderr
        if note:
            separator = "\n" if program_stderr and not program_stderr.endswith("\n") else ""
            program_stderr += f"{separator}[sandbox] {note}"
        return RunResult(status, stdout.decode(errors="replace"), program_stderr, exit_code,
                         time.monotonic() - start)


def _read_multiplexed(sock, stdout: bytearray, stderr: bytearray, cap: int, on_overflow) -> str | None:
    """Reads Docker's multiplexed attach stream (8-byte headers: stream id, size) until EOF; stops keeping
    output past `cap` bytes of stdout + stderr and calls on_overflow once. Returns "output" when it did."""
    buffer = b""
    total = 0
    overflowed = None
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return overflowed
        buffer += chunk
        while len(buffer) >= 8:
            size = int.from_bytes(buffer[4:8], "big")
            if len(buffer) < 8 + size:
                break
            stream, payload, buffer = buffer[0], buffer[8:8 + size], buffer[8 + size:]
            target = stdout if stream == 1 else stderr
            # Supervisor report lines (on stderr) are not program output: never cut them off.
            room = cap - total
            if stream == 2 and _STDERR_MARK.encode() in payload:
                target += payload
                continue
            if room > 0:
                target += payload[:room]
            total += len(payload)
            if total > cap and overflowed is None:
                overflowed = "output"
                on_overflow()


def _split_reports(stderr: str, nonce: str) -> tuple[dict[str, dict], str]:
    """Takes the supervisor's report lines (behind this run's nonce) out of stderr."""
    marker = f"{_STDERR_MARK} {nonce} "
    events: dict[str, dict] = {}
    kept = []
    for line in stderr.split("\n"):
        if line.startswith(marker):
            try:
                event = json.loads(line[len(marker):])
                events.setdefault(event.pop("event"), event)
            except (ValueError, KeyError, AttributeError):
                pass
            continue
        kept.append(line)
    text = "\n".join(kept)
    return events, text.strip("\n") + ("\n" if text.strip("\n") else "")
