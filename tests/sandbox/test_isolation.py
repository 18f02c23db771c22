"""The bubblewrap sandbox against hostile programs: each one is contained, reported with a status, and the host
(this test process, its environment, its files, its other processes) is unharmed."""

import asyncio
import os
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from sandbox.bwrap_backend import _UID_BASE, _UID_RANGE, BwrapBackend
from sandbox.types import Limits, RunRequest

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (apt-get install -y bubblewrap)"
)
REPO = Path(__file__).resolve().parents[2]
QUICK = dict(cpu_time_s=2, wall_time_s=5)


@pytest.fixture(scope="module")
def backend():
    backend = BwrapBackend(max_parallel=2)
    ok, reason = backend.available()
    if not ok:
        pytest.skip(f"bubblewrap cannot create a sandbox on this host: {reason}")
    return backend


def run(backend, code, language="python", stdin="", files=None, **limits):
    request = RunRequest(language, code, stdin=stdin, files=files or {}, limits=Limits(**{**QUICK, **limits}))
    return backend.run_sync(request)


def sandbox_processes_left():
    """Host processes still running under a per-run sandbox uid (as root each run has its own)."""
    left = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                uid = os.stat(f"/proc/{entry}").st_uid
            except OSError:
                continue
            if _UID_BASE <= uid < _UID_BASE + _UID_RANGE:
                left.append(int(entry))
    return left


def wait_until_no_sandbox_processes(timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while sandbox_processes_left() and time.monotonic() < deadline:
        time.sleep(0.05)
    return sandbox_processes_left()


def test_a_plain_program_reads_stdin_and_its_files(backend):
    code = "import helper\nprint(helper.double(int(input())), open('data/x.txt').read())"
    result = run(backend, code, stdin="21\n", files={"helper.py": "def double(x): return 2 * x\n",
                                                    "data/x.txt": "payload"})
    assert (result.status, result.exit_code) == ("ok", 0), result.stderr
    assert result.stdout.strip() == "42 payload"


def test_nonzero_exit_is_a_runtime_error(backend):
    result = run(backend, "import sys\nprint('partial')\nsys.exit(3)")
    assert (result.status, result.exit_code, result.stdout) == ("runtime_error", 3, "partial\n")


def test_fork_bomb_is_capped_by_the_process_limit(backend):
    # Forks until the kernel refuses, children parked: the count stays under max_processes.
    code = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    while n < 10000:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print(n, e.errno)\n"
    )
    result = run(backend, code, max_processes=16)
    assert result.status == "ok", result.stderr
    forked, errno_value = map(int, result.stdout.split())
    # max_processes counts every process of the sandbox (bubblewrap's, the supervisor, the program's)
    assert 0 < forked <= 16 and errno_value == 11  # EAGAIN
    # The sleeping children died with the sandbox's pid namespace.
    if os.geteuid() == 0:
        assert wait_until_no_sandbox_processes() == []


def test_classic_fork_bomb_times_out_and_leaves_nothing_behind(backend):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = run(backend, code, max_processes=16, cpu_time_s=2, wall_time_s=2)
    assert result.status == "timeout", (result.status, result.stderr)
    if os.geteuid() == 0:
        assert wait_until_no_sandbox_processes() == []


def test_infinite_loop_is_a_timeout(backend):
    result = run(backend, "while True:\n    pass\n", cpu_time_s=1, wall_time_s=4)
    assert result.status == "timeout"
    assert "exceeded" in result.stderr


def test_sleeping_forever_hits_the_wall_clock(backend):
    result = run(backend, "import time\nprint('start', flush=True)\ntime.sleep(60)", cpu_time_s=2, wall_time_s=1)
    assert result.status == "timeout"
    assert result.stdout == "start\n"
    assert "wall time" in result.stderr


def test_memory_bomb_is_a_memory_limit(backend):
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 * 1024))\n"
    result = run(backend, code, memory_mb=128, cpu_time_s=5, wall_time_s=10)
    assert result.status == "memory_limit", (result.status, result.stderr[-500:])


def test_memory_spread_over_processes_is_summed(backend):
    # Each process stays under the per-process limit (RLIMIT_AS); together they pass it: the supervisor's
    # summed-PSS watch kills them all.
    code = (
        "import os, time\n"
        "for _ in range(6):\n"
        "    if os.fork() == 0:\n"
        "        block = bytearray(80 * 1024 * 1024)\n"
        "        time.sleep(30)\n"
        "        os._exit(0)\n"
        "time.sleep(30)\n"
    )
    result = run(backend, code, memory_mb=256, cpu_time_s=5, wall_time_s=10)
    assert result.status == "memory_limit", (result.status, result.stderr[-500:])
    assert "together" in result.stderr


def test_no_network_not_even_the_hosts_loopback(backend):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    code = (
        "import socket\n"
        f"for host, port in [('127.0.0.1', {port}), ('1.1.1.1', 80), ('pypi.org', 443)]:\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=2).close()\n"
        "        print('CONNECTED', host)\n"
        "    except OSError as e:\n"
        "        print('blocked', host, type(e).__name__)\n"
    )
    try:
        result = run(backend, code)
    finally:
        listener.close()
    assert result.status == "ok", result.stderr
    assert "CONNECTED" not in result.stdout
    assert result.stdout.count("blocked") == 3


def test_writes_outside_the_working_directory_fail(backend):
    name = f"sandbox-escape-{secrets.token_hex(4)}"
    targets = [f"/etc/{name}", str(REPO / name), f"/usr/{name}", f"/{name}", f"/root/{name}", f"/dev/{name}"]
    code = (
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        with open(path, 'w') as f:\n"
        "            f.write('x')\n"
        "        print('WROTE', path)\n"
        "    except OSError as e:\n"
        "        print('denied', path, type(e).__name__)\n"
        "open('inside.txt', 'w').write('fine')\n"
        "print('inside ok')\n"
    )
    result = run(backend, code)
    assert result.status == "ok", result.stderr
    assert "WROTE" not in result.stdout and "inside ok" in result.stdout
    assert result.stdout.count("denied") == len(targets)
    for path in targets:
        assert not os.path.exists(path)


def test_the_hosts_environment_is_not_visible(backend, monkeypatch):
    canary = f"canary-{secrets.token_hex(8)}"
    monkeypatch.setenv("RLVR_SANDBOX_CANARY", canary)
    code = (
        "import os\n"
        "print(dict(os.environ))\n"
        "for pid in os.listdir('/proc'):\n"
        "    if pid.isdigit():\n"
        "        try:\n"
        "            print(open(f'/proc/{pid}/environ', 'rb').read())\n"
        "        except OSError:\n"
        "            pass\n"
    )
    result = run(backend, code)
    assert result.status == "ok", result.stderr
    assert canary not in result.stdout and "RLVR_SANDBOX_CANARY" not in result.stdout
    assert "'HOME': '/tmp'" in result.stdout  # the sandbox's own minimal environment


def test_host_files_are_not_readable(backend, tmp_path):
    secret = f"secret-{secrets.token_hex(8)}"
    in_repo = REPO / f".sandbox-canary-{secrets.token_hex(4)}"
    in_tmp = tmp_path / "canary.txt"
    in_repo.write_text(secret)
    in_tmp.write_text(secret)
    paths = [str(in_repo), str(in_tmp), str(REPO / "setup.cfg"), "/etc/shadow", "/etc/passwd",
             "/root/.bash_history", "/proc/1/root/etc/hostname"]
    code = (
        f"for path in {paths!r}:\n"
        "    try:\n"
        "        print('READ', path, open(path).read()[:100])\n"
        "    except OSError as e:\n"
        "        print('absent', path, type(e).__name__)\n"
        "import os\n"
        "print(sorted(os.listdir('/')))\n"
    )
    try:
        result = run(backend, code)
    finally:
        in_repo.unlink()
    assert result.status == "ok", result.stderr
    assert secret not in result.stdout
    assert "READ" not in result.stdout, result.stdout
    assert "'work'" not in result.stdout and "'root'" not in result.stdout


def test_killing_its_parent_and_everything_harms_nothing_outside(backend):
    bystander = subprocess.Popen(["sleep", "30"])  # a host process of the same (host) user
    try:
        code = (
            "import os, signal\n"
            "print('pids', os.getpid(), os.getppid(), flush=True)\n"
            "for target in (os.getppid(), 1, -1):\n"
            "    try:\n"
            "        os.kill(target, signal.SIGKILL)\n"
            "    except OSError as e:\n"
            "        print('refused', target, e.errno, flush=True)\n"
            "os.system('kill -9 -1')\n"
            "print('still here', flush=True)\n"
        )
        result = run(backend, code)
        assert result.status == "runtime_error", (result.status, result.stderr)
        assert "supervisor" in result.stderr
        assert bystander.poll() is None  # the host process lives on
        assert run(backend, "print('next run fine')").stdout == "next run fine\n"
    finally:
        bystander.kill()
        bystander.wait()


def test_huge_output_is_an_output_limit(backend):
    result = run(backend, "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", max_output_bytes=100_000)
    assert result.status == "output_limit"
    assert len(result.stdout) <= 100_000


def test_kernel_interfaces_outside_the_rlimits_are_refused(backend):
    code = (
        "import os, ctypes\n"
        "try:\n"
        "    os.memfd_create('x')\n"
        "    print('memfd allowed')\n"
        "except OSError as e:\n"
        "    print('memfd', e.errno)\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print('shmget', libc.shmget(0, 1 << 20, 0o1000 | 0o600), ctypes.get_errno())\n"
    )
    result = run(backend, code)
    assert result.status == "ok", result.stderr
    assert result.stdout.split("\n")[:2] == ["memfd 1", "shmget -1 1"]


def test_c_program_runs_and_a_compile_error_is_reported(backend):
    ok = run(backend, '#include <stdio.h>\nint main(void){int x; scanf("%d", &x); printf("%d\\n", x * 2);}',
             language="c", stdin="21")
    assert (ok.status, ok.stdout) == ("ok", "42\n"), ok.stderr
    bad = run(backend, "int main(void) { return undefined_name; }", language="c")
    assert bad.status == "compile_error"
    assert "undefined_name" in bad.stderr


def test_cpp_program_runs(backend):
    code = "#include <iostream>\nint main(){ std::string s; std::cin >> s; std::cout << s.size() << std::endl; }"
    result = run(backend, code, language="cpp", stdin="hello")
    assert (result.status, result.stdout) == ("ok", "5\n"), result.stderr


def test_runs_in_parallel_up_to_the_limit(backend):
    # Each program reports when it ran (the host's clock is the sandbox's clock); at most max_parallel=2
    # intervals overlap, and some do.
    code = "import time\nstart = time.time()\ntime.sleep(1.0)\nprint(start, time.time())\n"

    async def many():
        return await asyncio.gather(*(backend.run(RunRequest("python", code, limits=Limits(**QUICK)))
                                      for _ in range(4)))

    results = asyncio.run(many())
    assert all(r.status == "ok" for r in results), [r.stderr for r in results]
    intervals = [tuple(map(float, r.stdout.split())) for r in results]
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert peak == 2


def test_the_program_cannot_reach_the_supervisors_report(backend):
    # The supervisor (the program's parent, same uid) is non-dumpable: its descriptors and memory are closed
    # to the program, so a forged "exit 0" cannot be slipped into its report.
    code = (
        "import os\n"
        "parent = os.getppid()\n"
        "for path in (f'/proc/{parent}/fd', f'/proc/{parent}/mem', f'/proc/{parent}/environ'):\n"
        "    try:\n"
        "        print('OPENED', path, os.listdir(path) if path.endswith('fd') else open(path, 'rb').read(8))\n"
        "    except OSError as e:\n"
        "        print('denied', path, type(e).__name__)\n"
        "raise SystemExit(5)\n"
    )
    result = run(backend, code)
    assert (result.status, result.exit_code) == ("runtime_error", 5)
    assert "OPENED" not in result.stdout and result.stdout.count("denied") == 3
