"""One `python -m rlvr.start` run watched from outside: every process of its tree, every /dev/shm file those
processes map and every socket file they bind, recorded while it runs, so that a test can say exactly what *this*
run left behind on a machine where other people's runs come and go (never "all vLLM processes", never "all psm_*
files").

    watch = RunWatch(cli_command(config_path, "run.max_steps=3"), log_path)
    watch.wait_until(lambda: logged_steps(run_dir) >= {0})   # polls the tree while it waits
    watch.signal(signal.SIGKILL)
    left = watch.leftovers(timeout_s=60)                      # processes still alive, segments still named
    watch.clean_up()                                          # a failing test leaves nothing either
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rlvr.lifecycle.guardian import alive, descendants, shm_mappings, start_time
from rlvr.lifecycle.run_tmpdir import PREFIX

POLL_S = 0.2


@dataclass
class Leftovers:
    processes: list[str] = field(default_factory=list)  # "pid cmdline" of what is still alive
    segments: list[str] = field(default_factory=list)  # /dev/shm files, socket files and temp dirs still there

    def __bool__(self) -> bool:
        return bool(self.processes or self.segments)


def _interruptible() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cli_command(config: Path, *overrides: str) -> list[str]:
    """`python -m rlvr.start --config <config> <overrides>`, as a user types it."""
    return [sys.executable, "-m", "rlvr.start", "--config", str(config), *overrides]


class RunWatch:
    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None):
        """Starts `argv` (`cli_command(...)`, or the README's own command line) in `cwd`; its stdout and stderr go
        to `log`."""
        self.log = log
        with open(log, "wb") as out:
            # A session of its own: os.killpg(pid, SIGINT) is what a terminal's Ctrl-C sends to a foreground job.
            # SIGINT's default disposition too, as a foreground job has: a suite started in the background by a
            # shell without job control (`bash -c "... &"`) inherits SIGINT ignored, Python then installs no
            # KeyboardInterrupt handler, and the run would finish its steps through the test's Ctrl-C.
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd,
                                         env={**os.environ, **(env or {})}, preexec_fn=_interruptible)
        self.processes: dict[int, tuple[int, str]] = {}  # pid -> (start time, command line)
        self.segments: set[str] = set()
        self.observe()

    def observe(self) -> list[int]:
        """Records the run's current process tree, the /dev/shm files its processes map, the socket files they
        bind and the run's temp dir; returns its pids."""
        pids = [self.proc.pid, *descendants(self.proc.pid)]
        for pid in pids:
            self._record(pid, _cmdline(pid))
            self.segments |= shm_mappings(pid) | socket_files(pid)
        self.segments |= run_tmpdirs(pids)
        return pids

    def _record(self, pid: int, command: str) -> None:
        started = start_time(pid)
        if started is None:
            return
        known = self.processes.get(pid)
        # The latest title (vLLM renames its processes once started), unless the process is going: once it has
        # released its memory, and before it reads as a zombie, its command line reads empty, which would erase
        # "VLLM::EngineCore" from the record of a run that ended normally (a CI run failed so).
        if known is None or (known[0] == started and command not in ("?", "")):
            self.processes[pid] = (started, command)

    def wait_until(self, condition: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            self.observe()
            if condition():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"the run exited ({self.proc.returncode}) before the awaited point:\n"
                                     f"{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not reached within {timeout_s:.0f}s:\n{self.log_tail()}")
            time.sleep(POLL_S)

    def signal(self, sig: int, group: bool = False) -> None:
        self.observe()
        if group:
            os.killpg(self.proc.pid, sig)
        else:
            os.kill(self.proc.pid, sig)

    def wait_exit(self, timeout_s: float, each_poll: Callable[[list[int]], None] | None = None) -> int:
        """Waits for the command to end, observing its tree; `each_poll(pids)` looks at the live tree too (a test's
        own probe: what it listens on, what it writes)."""
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None:
            pids = self.observe()
            if each_poll is not None:
                each_poll(pids)
            if time.monotonic() > deadline:
                raise AssertionError(f"the run did not exit within {timeout_s:.0f}s:\n{self.log_tail()}")
            time.sleep(POLL_S)
        return self.proc.returncode

    def leftovers(self, timeout_s: float) -> Leftovers:
        """What of the run is still there once everything had `timeout_s` to go away (returns early when all
        is gone)."""
        alive_pids = wait_gone({pid: started for pid, (started, _) in self.processes.items()}, timeout_s,
                               also=lambda: any(os.path.exists(s) for s in self.segments))
        return Leftovers([f"{pid} {self.processes[pid][1]}" for pid in sorted(alive_pids)],
                         sorted(s for s in self.segments if os.path.exists(s)))

    def clean_up(self) -> None:
        """SIGKILL to whatever of this run is still alive, and its segments unlinked (the test's own cleanup)."""
        for pid, (started, _) in self.processes.items():
            if alive(pid, started):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.proc.poll() is None:
            self.proc.wait(30)
        for segment in self.segments:
            try:
                os.unlink(segment)
            except OSError:
                pass

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def wait_gone(processes: dict[int, int], timeout_s: float, also: Callable[[], bool] = lambda: False) -> list[int]:
    """Waits until none of `processes` (pid -> start time) is alive and `also()` is false, at most `timeout_s`;
    returns the pids still alive."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = [pid for pid, started in processes.items() if alive(pid, started)]
        if (not left and not also()) or time.monotonic() > deadline:
            return left
        time.sleep(POLL_S)


def socket_files(pid: int) -> set[str]:
    """Paths of the Unix sockets the process has open (vLLM binds its ZeroMQ sockets to files under /tmp), except
    Ray's, which live in its session directory with its logs, kept on purpose."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
        with open(f"/proc/{pid}/net/unix") as f:
            rows = [line.split() for line in f.readlines()[1:]]
    except OSError:  # the process went, or is not ours to read
        return set()
    return {row[7] for row in rows if len(row) > 7 and row[6] in inodes and row[7].startswith("/")
            and "/ray/session_" not in row[7]}


def run_tmpdirs(pids: list[int]) -> set[str]:
    """The temp dirs of the drivers among `pids` (rlvr/lifecycle/run_tmpdir.py: TMPDIR of the run's whole tree)."""
    prefixes = tuple(f"{PREFIX}{pid}-" for pid in pids)
    base = tempfile.gettempdir()
    try:
        return {os.path.join(base, name) for name in os.listdir(base) if name.startswith(prefixes)}
    except OSError:
        return set()


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
    except OSError:
        return "?"


def run_dir_of(output_dir: Path, name: str) -> Path | None:
    runs = sorted(output_dir.glob(f"{name}-*"), key=lambda p: p.stat().st_mtime)
    return runs[-1] if runs else None


def trained_steps(run_dir: Path | None) -> list[int]:
    """Steps with a training record in metrics.jsonl, in file order (a torn last line is skipped)."""
    if run_dir is None or not (run_dir / "metrics.jsonl").exists():
        return []
    steps = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if "actor/loss" in record:
            steps.append(record["step"])
    return steps
