"""Runs untrusted code under bubblewrap (Debian package `bubblewrap`), rlimits and a seccomp deny-list.

How one run is contained (each layer and what it is for):

  host uid        As root, each run gets a uid of its own (random, from a range no account uses), taken with
                  subprocess's `user=`/`group=` before bubblewrap starts: RLIMIT_NPROC counts processes per
                  uid and the kernel ignores it for uid 0, so a fork bomb is only bounded under a uid of its
                  own; it also means the program cannot signal or ptrace anything on the host. Not root: the
                  caller's own uid, with the process limit raised by the number of processes it already has.
  prlimit         (util-linux) caps processes (RLIMIT_NPROC), file size (RLIMIT_FSIZE) and core dumps for the
                  whole sandbox, plus a CPU/address-space backstop; the supervisor inside sets the per-program
                  CPU time, address space, stack and open-file limits.
  bubblewrap      --unshare-all (user, pid, net, ipc, uts, cgroup namespaces: no network but a loopback of
                  its own, no view of host processes), --disable-userns (no nested user namespaces),
                  --cap-drop ALL, --die-with-parent (a dying server takes its sandboxes with it),
                  --new-session (no TIOCSTI into a terminal), --clearenv with a minimal environment (nothing of
                  the host's environment leaks), a read-only view of /usr (plus the /bin, /lib* links, a few
                  /etc files the dynamic linker and compilers need, and the Python prefix when it lives
                  elsewhere), a fresh /proc for the pid namespace, a minimal /dev, size-capped tmpfs on /tmp
                  (the working directory) and /dev/shm, and the root and /dev remounted read-only.
  seccomp         EPERM for memfd_create / SysV shm (memory no rlimit counts), io_uring, bpf, ptrace and
                  friends (sandbox/seccomp.py).
  supervisor      sandbox/_supervisor.py, the sandbox's first process: compiles C/C++, runs the program under
                  its rlimits, sums the memory of all sandbox processes, enforces the wall clock from inside,
                  and reports over a pipe the program never holds.
  host            a wall-clock backstop that SIGKILLs the process group (bubblewrap's init then takes the pid
                  namespace down with it), and stdout + stderr read incrementally and cut at max_output_bytes.

Not contained (see README/report): CPU contention (no cgroup CPU quota: a run may use all cores up to its
limits), and kernel bugs reachable through the syscalls still allowed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sandbox import seccomp
from sandbox.loops import CrossLoopLimiter, run_blocking, run_on_stock_loop
from sandbox.types import Limits, RunRequest, RunResult

logger = logging.getLogger(__name__)

SUPERVISOR_SOURCE = Path(__file__).with_name("_supervisor.py")
SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}
# Host paths shown read-only inside (when present). /bin, /lib* are usually symlinks into /usr (merged /usr) and
# are recreated as symlinks; /etc gets only what the dynamic linker and `cc`/`c++` alternatives need.
_ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = ("/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d")
_COMPILERS = {
    "c": ["gcc", "-std=gnu17", "-O2", "-pipe", "-o", "prog", "main.c", "-lm"],
    "cpp": ["g++", "-std=gnu++17", "-O2", "-pipe", "-o", "prog", "main.cpp"],
}
# Exit statuses of the program that mean it ran out of memory, by what it printed last.
_MEMORY_MARKERS = ("MemoryError", "std::bad_alloc", "Cannot allocate memory", "out of memory")
_UID_BASE = 1_600_000_000  # per-run uids: far above any account's uid, below the 2**32 - 1 "no uid"
_UID_RANGE = 1 << 20
_STARTUP_GRACE_S = 15.0  # bubblewrap + interpreter start (a busy machine can be slow)
_WALL_GRACE_S = 2.0  # the supervisor enforces the wall clock; the host kills only if it does not

DEFAULT_MAX_LIMITS = Limits(
    cpu_time_s=60.0, wall_time_s=120.0, memory_mb=4096, max_processes=256, max_output_bytes=64_000_000,
    max_file_bytes=256_000_000,
)


class SandboxUnavailable(RuntimeError):
    """The backend cannot run anything on this host (no bwrap, no user namespaces, ...)."""


class CompileLimits:
    """Limits for the compiler (roomier than the program's: g++ on <iostream> alone needs ~200 MB)."""

    def __init__(self, cpu_s: float = 20.0, wall_s: float = 30.0, memory_mb: int = 2048) -> None:
        self.cpu_s, self.wall_s, self.memory_mb = cpu_s, wall_s, memory_mb

    def to_dict(self) -> dict[str, float]:
        return {"cpu_s": self.cpu_s, "wall_s": self.wall_s, "memory_mb": self.memory_mb}


class BwrapBackend:
    """`await backend.run(RunRequest(...))` -> RunResult, at most `max_parallel` runs at a time (across threads
    and event loops of this process). Requests above `max_limits` are refused with ValueError."""

    name = "bwrap"

    def __init__(
        self,
        max_parallel: int = 2,
        python: str | None = None,
        max_limits: Limits | None = None,
        compile_limits: CompileLimits | None = None,
        bwrap: str | None = None,
    ) -> None:
        if max_parallel < 1:
            raise ValueError(f"max_parallel must be >= 1, got {max_parallel}")
        self.max_parallel = max_parallel
        self.max_limits = max_limits or DEFAULT_MAX_LIMITS
        self.compile_limits = compile_limits or CompileLimits()
        self._bwrap = bwrap or shutil.which("bwrap")
        self._prlimit = shutil.which("prlimit")
        self._python = python
        self._limiter = CrossLoopLimiter(max_parallel)
        self._uids_in_use: set[int] = set()
        self._uid_lock = threading.Lock()
        self._seccomp = seccomp.build()
        self._supervisor = SUPERVISOR_SOURCE.read_bytes()
        self._checked: tuple[bool, str] | None = None
        self._disable_userns: bool | None = None

    # -- availability -------------------------------------------------------------------------------------

    def available(self) -> tuple[bool, str]:
        """(True, "") when a trivial sandbox runs here; else (False, why). Cached after the first call."""
        if self._checked is None:
            self._checked = self._check()
        return self._checked

    def _check(self) -> tuple[bool, str]:
        if self._bwrap is None:
            return False, "bubblewrap not installed (Debian/Ubuntu: apt-get install -y bubblewrap)"
        if self._prlimit is None:
            return False, "prlimit not found (Debian/Ubuntu: part of util-linux)"
        try:
            python = self.python
        except SandboxUnavailable as e:
            return False, str(e)
        result = run_blocking(self._run(RunRequest("python", "print('ok')"), python))
        if result.status != "ok" or result.stdout.strip() != "ok":
            return False, f"bubblewrap cannot start a sandbox here: {result.status}: {result.stderr.strip()[:500]}"
        return True, ""

    @property
    def python(self) -> str:
        """The interpreter that runs Python programs inside (real path): /usr/bin/python3 when the host has one,
        else the interpreter this process runs on (its prefix is then mounted read-only)."""
        if self._python is None:
            candidates = ["/usr/bin/python3", os.path.join(sys.base_prefix, "bin", "python3"), sys.executable]
            for candidate in candidates:
                real = os.path.realpath(candidate)
                if os.path.isfile(real) and os.access(real, os.X_OK):
                    self._python = real
                    break
            else:
                raise SandboxUnavailable(f"no Python interpreter found among {candidates}")
        return os.path.realpath(self._python)

    # -- running --------------------------------------------------------------------------------------------

    async def run(self, request: RunRequest) -> RunResult:
        request.validate()
        request.limits.check_within(self.max_limits)
        if not isinstance(asyncio.get_running_loop(), asyncio.BaseEventLoop):
            # uvloop (the loop of Ray's async actors) refuses subprocess_exec(user=, group=), which runs as root
            # need: the run goes to a stock asyncio loop in a thread of its own.
            return await asyncio.to_thread(run_on_stock_loop, self.run(request))
        if self._bwrap is None or self._prlimit is None:
            return RunResult("sandbox_error", stderr=self.available()[1])
        async with self._limiter:
            return await self._run(request, self.python)

    def run_sync(self, request: RunRequest) -> RunResult:
        """`run` for callers without an event loop."""
        return run_blocking(self.run(request))

    async def _run(self, request: RunRequest, python: str) -> RunResult:
        start = time.monotonic()
        uid = self._take_uid()
        fds: list[int] = []
        try:
            return await self._spawn_and_watch(request, python, uid, fds, start)
        except OSError as e:
            logger.warning("sandbox run failed to start", exc_info=True)
            return RunResult("sandbox_error", stderr=f"{type(e).__name__}: {e}", duration_s=time.monotonic() - start)
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._give_back_uid(uid)

    async def _spawn_and_watch(
        self, request: RunRequest, python: str, uid: int | None, fds: list[int], start: float
    ) -> RunResult:
        limits = request.limits
        compiled = request.language in _COMPILERS
        bundle = {
            "language": request.language,
            "code": request.code,
            "stdin": request.stdin,
            "files": request.files,
            "limits": limits.to_dict(),
            "python": python,
        }
        if compiled:
            bundle["compile"] = dict(self.compile_limits.to_dict(), argv=self._compiler_argv(request.language))
        bundle_fd = _memfd("sandbox-bundle", json.dumps(bundle).encode())
        supervisor_fd = _memfd("sandbox-supervisor", self._supervisor)
        fds += [bundle_fd, supervisor_fd]
        seccomp_fd = None
        if self._seccomp is not None:
            seccomp_fd = _memfd("sandbox-seccomp", self._seccomp)
            fds.append(seccomp_fd)
        report_r, report_w = os.pipe()
        fds.append(report_w)  # report_r is closed by its transport

        argv = self._prlimit_argv(limits, compiled, uid) + self._bwrap_argv(
            limits, python, supervisor_fd, seccomp_fd
        ) + [python, "-I", "-S", "-B", "/.sandbox/supervisor.py",
             "--report-fd", str(report_w), "--bundle-fd", str(bundle_fd)]
        pass_fds = [bundle_fd, supervisor_fd, report_w] + ([seccomp_fd] if seccomp_fd is not None else [])
        kwargs: dict[str, Any] = {}
        if uid is not None:
            kwargs.update(user=uid, group=uid, extra_groups=[])
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=pass_fds,
                start_new_session=True,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                close_fds=True,
                **kwargs,
            )
        except BaseException:
            os.close(report_r)
            raise
        os.close(report_w)
        fds.remove(report_w)
        return await _Watch(proc, report_r, limits, compiled, self.compile_limits, start).result()

    def _compiler_argv(self, language: str) -> list[str]:
        argv = list(_COMPILERS[language])
        found = shutil.which(argv[0], path="/usr/local/bin:/usr/bin:/bin")
        argv[0] = found or f"/usr/bin/{argv[0]}"
        return argv

    def _prlimit_argv(self, limits: Limits, compiled: bool, uid: int | None) -> list[str]:
        # Processes: bubblewrap's outer process and its init, the supervisor, then the program's own.
        nproc = limits.max_processes + 3
        if uid is None:
            nproc += _count_tasks_of(os.getuid())
        memory_mb = max(limits.memory_mb, self.compile_limits.memory_mb if compiled else 0) + 256
        cpu = int(limits.cpu_time_s + (self.compile_limits.cpu_s if compiled else 0)) + 5
        return [
            self._prlimit,
            f"--nproc={nproc}",
            f"--fsize={limits.max_file_bytes}",
            "--core=0",
            f"--as={memory_mb * 1024 * 1024}",
            f"--cpu={cpu}",
            "--",
        ]

    def _bwrap_argv(self, limits: Limits, python: str, supervisor_fd: int, seccomp_fd: int | None) -> list[str]:
        argv = [self._bwrap, "--unshare-all", "--unshare-user"]
        if self._supports_disable_userns():
            argv.append("--disable-userns")
        argv += ["--cap-drop", "ALL", "--die-with-parent", "--new-session", "--hostname", "sandbox"]
        argv += ["--ro-bind", "/usr", "/usr"]
        for path in _ROOT_LINKS:
            if os.path.islink(path):
                argv += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                argv += ["--ro-bind", path, path]
        for path in _ETC_FILES:
            argv += ["--ro-bind-try", path, path]
        prefix = os.path.dirname(os.path.dirname(python))
        if not (prefix == "/usr" or prefix.startswith("/usr/")):
            argv += ["--ro-bind", prefix, prefix]
        tmp_bytes = max(64 * 1024 * 1024, 4 * limits.max_file_bytes)
        argv += [
            "--proc", "/proc",
            "--dev", "/dev",
            "--size", str(tmp_bytes), "--perms", "1777", "--tmpfs", "/tmp",
            "--size", str(16 * 1024 * 1024), "--perms", "1777", "--tmpfs", "/dev/shm",
            "--ro-bind-data", str(supervisor_fd), "/.sandbox/supervisor.py",
            "--remount-ro", "/dev",
            "--remount-ro", "/",
            "--chdir", "/tmp",
            "--clearenv",
        ]
        for key, value in SANDBOX_ENV.items():
            argv += ["--setenv", key, value]
        if seccomp_fd is not None:
            argv += ["--seccomp", str(seccomp_fd)]
        return argv + ["--"]

    def _supports_disable_userns(self) -> bool:
        if self._disable_userns is None:
            try:
                out = subprocess.run([self._bwrap, "--help"], capture_output=True, text=True, timeout=10)
                self._disable_userns = "--disable-userns" in out.stdout + out.stderr
            except (OSError, subprocess.SubprocessError):
                self._disable_userns = False
        return self._disable_userns

    def _take_uid(self) -> int | None:
        if os.geteuid() != 0:
            return None
        with self._uid_lock:
            while True:
                uid = _UID_BASE + random.randrange(_UID_RANGE)
                if uid not in self._uids_in_use:
                    self._uids_in_use.add(uid)
                    return uid

    def _give_back_uid(self, uid: int | None) -> None:
        if uid is not None:
            with self._uid_lock:
                self._uids_in_use.discard(uid)


class _Watch:
    """Reads one sandbox's stdout, stderr and supervisor report; kills it on the wall-clock backstop or when the
    output passes its cap; classifies the outcome."""

    def __init__(self, proc, report_r: int, limits: Limits, compiled: bool, compile_limits, start: float):
        self.proc = proc
        self.report_r = report_r
        self.limits = limits
        self.start = start
        self.compiled = compiled
        self.events: dict[str, dict] = {}
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.output_total = 0
        self.overflow = asyncio.Event()
        self.killed_by_host: str | None = None
        loop = asyncio.get_running_loop()
        self.deadline = loop.time() + _STARTUP_GRACE_S + limits.wall_time_s + _WALL_GRACE_S
        if compiled:
            self.deadline += compile_limits.wall_s

    async def result(self) -> RunResult:
        loop = asyncio.get_running_loop()
        report = asyncio.StreamReader(limit=1 << 20, loop=loop)
        try:
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(report, loop=loop), os.fdopen(self.report_r, "rb", 0)
            )
        except BaseException:
            self._kill("cancelled")
            raise
        readers = [
            asyncio.create_task(self._read_output(self.proc.stdout, self.stdout)),
            asyncio.create_task(self._read_output(self.proc.stderr, self.stderr)),
            asyncio.create_task(self._read_report(report)),
        ]
        waiter = asyncio.create_task(self.proc.wait())
        overflow = asyncio.create_task(self.overflow.wait())
        try:
            while True:
                remaining = self.deadline - loop.time()
                if remaining <= 0:
                    self._kill("wall")
                    break
                done, _ = await asyncio.wait({waiter, overflow}, timeout=min(remaining, 0.5),
                                             return_when=asyncio.FIRST_COMPLETED)
                if overflow in done:
                    self._kill("output")
                    break
                if waiter in done:
                    break
            await waiter
            # The pid namespace dies with bubblewrap, so the pipes close right after; bounded all the same.
            await asyncio.wait(readers, timeout=5.0)
        finally:
            for task in readers + [overflow]:
                task.cancel()
            transport.close()
            if not waiter.done():  # cancelled from outside: the sandbox must not outlive its caller
                self._kill("cancelled")
                waiter.cancel()
        return self._classify(time.monotonic() - self.start)

    def _kill(self, why: str) -> None:
        if self.killed_by_host is None:
            self.killed_by_host = why
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    async def _read_output(self, stream: asyncio.StreamReader, buffer: bytearray) -> None:
        cap = self.limits.max_output_bytes
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                return
            room = cap - self.output_total
            if room > 0:
                buffer += chunk[:room]
            self.output_total += len(chunk)
            if self.output_total > cap:
                # Keep draining (and dropping) until EOF: asyncio's Process.wait() returns only once the
                # pipes are closed, which it notices only while reading.
                self.overflow.set()

    async def _read_report(self, reader: asyncio.StreamReader) -> None:
        loop = asyncio.get_running_loop()
        while True:
            line = await reader.readline()
            if not line:
                return
            try:
                event = json.loads(line)
                name = event.pop("event")
            except (ValueError, KeyError, AttributeError):
                continue
            self.events.setdefault(name, event)  # first one wins: nothing is allowed to amend a report
            if name == "running":
                self.deadline = loop.time() + self.limits.wall_time_s + _WALL_GRACE_S

    def _classify(self, duration: float) -> RunResult:
        stdout = self.stdout.decode(errors="replace")
        stderr = self.stderr.decode(errors="replace")
        status, exit_code, note = classify(self.events, self.killed_by_host, stderr, self.limits, self.compiled)
        if status == "compile_error":
            stderr = self.events.get("compiled", {}).get("output", "") or stderr
        if note:
            stderr = (stderr + ("\n" if stderr and not stderr.endswith("\n") else "") + f"[sandbox] {note}")
        return RunResult(status, stdout, stderr, exit_code, duration)


def classify(
    events: dict[str, dict], killed_by_host: str | None, stderr: str, limits: Limits, compiled_language: bool = False
):
    """(status, exit_code, note) from the supervisor's report and what the host did. A pure function."""
    exit_event = events.get("exit")
    exit_code = None
    if exit_event:
        if exit_event.get("returncode") is not None:
            exit_code = exit_event["returncode"]
        elif exit_event.get("signal") is not None:
            exit_code = 128 + exit_event["signal"]
    if killed_by_host == "output":
        return "output_limit", exit_code, f"output passed {limits.max_output_bytes} bytes: killed"
    if "started" not in events:
        if killed_by_host:
            return "sandbox_error", None, "the sandbox did not start in time"
        return "sandbox_error", None, "the sandbox did not start (see bubblewrap's message above)"
    compiled = events.get("compiled")
    if compiled is not None and not compiled.get("ok"):
        return "compile_error", None, ""
    if killed_by_host == "wall" and "running" not in events:
        if compiled_language and "compiled" not in events:
            return "compile_error", None, "compilation timed out"
        return "sandbox_error", None, "the sandbox stopped responding before the program started"
    if killed_by_host == "wall":
        return "timeout", exit_code, f"wall time {limits.wall_time_s}s exceeded: killed"
    if exit_event is None:
        if "running" in events:
            return "runtime_error", None, "the program killed the sandbox supervisor"
        return "sandbox_error", None, "the sandbox supervisor exited without a report"
    if exit_event.get("error"):
        return "sandbox_error", None, f"could not start the program: {exit_event['error']}"
    killed = exit_event.get("killed")
    if killed == "wall":
        return "timeout", exit_code, f"wall time {limits.wall_time_s}s exceeded: killed"
    if killed == "memory":
        return "memory_limit", exit_code, f"the sandbox's processes passed {limits.memory_mb} MB together: killed"
    sig = exit_event.get("signal")
    returncode = exit_event.get("returncode")
    cpu_s = float(exit_event.get("cpu_s") or 0.0)
    if sig == signal.SIGXCPU or (returncode != 0 and cpu_s >= limits.cpu_time_s - 0.05):
        return "timeout", exit_code, f"CPU time {limits.cpu_time_s}s exceeded"
    if returncode == 0:
        return "ok", 0, ""
    if any(marker in stderr[-4000:] for marker in _MEMORY_MARKERS):
        return "memory_limit", exit_code, f"memory limit {limits.memory_mb} MB reached"
    # C's malloc returns NULL at the limit and the program usually crashes on it: a crash near the limit.
    maxrss = float(exit_event.get("maxrss_kb") or 0) * 1024
    if sig in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT) and maxrss >= 0.8 * limits.memory_mb * 1024 * 1024:
        return "memory_limit", exit_code, f"crashed at {maxrss / 2**20:.0f} MB of its {limits.memory_mb} MB limit"
    if sig == signal.SIGXFSZ:
        return "runtime_error", exit_code, f"file size limit {limits.max_file_bytes} bytes exceeded"
    if sig is not None:
        return "runtime_error", exit_code, f"killed by signal {_signal_name(sig)}"
    return "runtime_error", exit_code, ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _count_tasks_of(uid: int) -> int:
    """Threads (RLIMIT_NPROC counts them) of all processes owned by `uid`; racy, an estimate."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            total += int(stat.rsplit(b")", 1)[1].split()[17])
        except (OSError, ValueError, IndexError):
            continue
    return total
