"""The Docker backend: the same interface as bubblewrap's. Runs only where a Docker engine, the `docker` SDK and
the image are present (skipped with the reason otherwise); its stream parsing is checked everywhere."""

import asyncio
import json

import pytest

from sandbox.docker_backend import DockerBackend, _read_multiplexed, _split_reports
from sandbox.types import Limits, RunRequest


@pytest.fixture(scope="module")
def docker_backend():
    backend = DockerBackend(max_parallel=2)
    ok, reason = backend.available()
    if not ok:
        pytest.skip(f"Docker backend unavailable: {reason}")
    return backend


def test_docker_runs_and_contains(docker_backend):
    limits = Limits(cpu_time_s=2, wall_time_s=5, memory_mb=128)

    def run(code, **kwargs):
        return asyncio.run(docker_backend.run(RunRequest("python", code, limits=limits, **kwargs)))

    ok = run("print(input())", stdin="hi")
    assert (ok.status, ok.stdout) == ("ok", "hi\n"), ok.stderr
    assert run("while True: pass").status == "timeout"
    assert run("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)").status == "runtime_error"
    assert run("x = bytearray(10**9)").status == "memory_limit"


class FakeSocket:
    def __init__(self, data: bytes, size: int = 5):
        self.chunks = [data[i:i + size] for i in range(0, len(data), size)]

    def recv(self, n):
        return self.chunks.pop(0) if self.chunks else b""


def frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def test_multiplexed_stream_is_demultiplexed_and_capped():
    data = frame(1, b"out1 ") + frame(2, b"err ") + frame(1, b"out2")
    out, err = bytearray(), bytearray()
    assert _read_multiplexed(FakeSocket(data), out, err, cap=100, on_overflow=lambda: None) is None
    assert (bytes(out), bytes(err)) == (b"out1 out2", b"err ")
    calls = []
    out, err = bytearray(), bytearray()
    assert _read_multiplexed(FakeSocket(frame(1, b"x" * 50) * 3), out, err, cap=60,
                             on_overflow=lambda: calls.append(1)) == "output"
    assert len(out) == 60 and calls == [1]


def test_supervisor_reports_are_taken_out_of_stderr():
    nonce = "n0"
    stderr = ("warning\n@@sandbox-supervisor n0 " + json.dumps({"event": "started"}) + "\n"
              "@@sandbox-supervisor forged " + json.dumps({"event": "exit", "returncode": 0}) + "\n"
              "@@sandbox-supervisor n0 " + json.dumps({"event": "exit", "returncode": 2}) + "\n")
    events, rest = _split_reports(stderr, nonce)
    assert events == {"started": {}, "exit": {"returncode": 2}}
    assert "warning" in rest and "forged" in rest and "n0" not in rest
