"""The sandbox's HTTP server, started as a real subprocess on loopback, and its clients."""

import asyncio
import json
import shutil
import urllib.error
import urllib.request

import pytest

from sandbox.bwrap_backend import BwrapBackend
from sandbox.client import HTTPSandboxClient, LocalSandboxClient, SandboxConnectionError, start_local_server
from sandbox.types import Limits, RunRequest

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (apt-get install -y bubblewrap)"
)
LIMITS = Limits(cpu_time_s=2, wall_time_s=5)


@pytest.fixture(scope="module")
def server():
    ok, reason = BwrapBackend().available()
    if not ok:
        pytest.skip(f"bubblewrap cannot create a sandbox on this host: {reason}")
    url, stop = start_local_server(max_parallel=2)
    yield url
    stop()


def post(url, body: bytes, content_type="application/json"):
    request = urllib.request.Request(url + "/run", data=body, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_url_is_loopback(server):
    assert server.startswith("http://127.0.0.1:")


def test_health(server):
    with urllib.request.urlopen(server + "/health", timeout=10) as response:
        body = json.loads(response.read())
    assert response.status == 200
    assert body["status"] == "ok" and body["backend"] == "bwrap" and body["max_parallel"] == 2


def test_run(server):
    request = RunRequest("python", "print(input()[::-1])", stdin="abc", limits=LIMITS)
    status, body = post(server, json.dumps(request.to_dict()).encode())
    assert status == 200
    assert (body["status"], body["stdout"], body["exit_code"]) == ("ok", "cba\n", 0)
    assert body["duration_s"] > 0


@pytest.mark.parametrize(
    "body, message",
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (json.dumps({"code": "print(1)"}).encode(), "language"),
        (json.dumps({"language": "cobol", "code": "x"}).encode(), "language"),
        (json.dumps({"language": "python", "code": "x", "files": {"../x": "y"}}).encode(), "bad file name"),
        (json.dumps({"language": "python", "code": "x", "limits": {"memory_mb": -1}}).encode(), "memory_mb"),
        (json.dumps({"language": "python", "code": "x", "limits": {"memory_mb": 10**9}}).encode(), "maximum"),
        (json.dumps({"language": "python", "code": "x", "colour": "blue"}).encode(), "colour"),
    ],
)
def test_bad_requests_are_400_with_a_message(server, body, message):
    status, answer = post(server, body)
    assert status == 400
    assert message in answer["error"]


def test_http_client_matches_local_client(server):
    requests = [
        RunRequest("python", "print(sum(map(int, input().split())))", stdin="1 2 3", limits=LIMITS),
        RunRequest("python", "import sys\nsys.stderr.write('oops\\n')\nsys.exit(4)", limits=LIMITS),
        RunRequest("python", "while True: pass", limits=Limits(cpu_time_s=1, wall_time_s=3)),
        RunRequest("c", "int main(void) { return nope; }", limits=LIMITS),
    ]

    async def both():
        http, local = HTTPSandboxClient(server, timeout_s=60), LocalSandboxClient(max_parallel=2)
        return (await asyncio.gather(*(http.run(r) for r in requests)),
                await asyncio.gather(*(local.run(r) for r in requests)))

    over_http, in_process = asyncio.run(both())
    for a, b in zip(over_http, in_process):
        assert (a.status, a.stdout, a.exit_code) == (b.status, b.stdout, b.exit_code)
    assert [r.status for r in over_http] == ["ok", "runtime_error", "timeout", "compile_error"]


def test_http_client_reports_rejections_and_unreachable_servers(server):
    client = HTTPSandboxClient(server)
    with pytest.raises(ValueError, match="maximum"):
        asyncio.run(client.run(RunRequest("python", "x", limits=Limits(memory_mb=10**9))))
    with pytest.raises(SandboxConnectionError, match="unreachable"):
        asyncio.run(HTTPSandboxClient("http://127.0.0.1:9", timeout_s=5).run(RunRequest("python", "x")))
