"""What a process starts goes away with it, however it goes away: a guardian process per owner.

A Ray actor killed by `ray.kill`, or by Ray because its driver was SIGKILLed, runs no `finally`, no `atexit` and no
signal handler; whatever it had started (vLLM's `VLLM::EngineCore` and `VLLM::Worker` processes, the judge server)
would live on as orphans holding gigabytes, with their /dev/shm segments. So the owner hands what it starts to a
small guardian process (stdlib only, its own session, so a terminal's Ctrl-C does not reach it):

    from rlvr.lifecycle import guard_process, guard_path
    proc = subprocess.Popen(...)
    guard_process(proc.pid)                 # this process and every descendant it ever has
    guard_path("/dev/shm/my-file-1234-*")   # a file, directory or glob, removed at the end

The guardian watches its owner through a pidfd (and the command pipe's end of file). When the owner is gone, or
says it is exiting, it sends SIGTERM to every guarded process still alive (their own graceful shutdown: vLLM's
engine stops its workers), SIGKILL to those still there after a grace period, then unlinks the /dev/shm files the
guarded processes had mapped (vLLM's shared-memory message queues, `psm_*`, which a killed engine never unlinks)
and removes the guarded paths. While the owner lives it refreshes, every few seconds, the process tree and the
mapped segments of what it guards, so that children that die before the owner are still accounted for.
Processes are known by (pid, start time): a recycled pid is never signalled.

Linux only (pidfd, /proc); elsewhere `guard_*` are no-ops and say so once in the log.
"""

from __future__ import annotations

import atexit
import glob
import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

REFRESH_S = 2.0  # how often the guardian re-reads the guarded process trees while the owner lives
TERM_GRACE_S = 5.0  # SIGTERM, then SIGKILL after this long


# ---------------------------------------------------------------------------------------------- /proc helpers
def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat); None if gone or a
    zombie (a zombie holds nothing but its pid)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # the command name may contain spaces and parentheses
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def alive(pid: int, started: int) -> bool:
    return start_time(pid) == started


def parent_map() -> dict[int, list[int]]:
    """ppid -> child pids, for every process on the machine."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(pid: int, children: dict[int, list[int]] | None = None) -> list[int]:
    children = parent_map() if children is None else children
    out, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(children.get(child, []))
    return out


def child_pids(pid: int | None = None) -> list[int]:
    """The direct children of `pid` (default: this process)."""
    return parent_map().get(os.getpid() if pid is None else pid, [])


def shm_mappings(pid: int) -> set[str]:
    """Files under /dev/shm that the process has mapped (and that still have a name)."""
    found = set()
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if path.startswith("/dev/shm/") and not path.endswith(" (deleted)"):
                    found.add(path)
    except OSError:
        pass
    return found


# ---------------------------------------------------------------------------------------------- guardian side
@dataclass
class Guarded:
    processes: dict[int, int] = field(default_factory=dict)  # pid -> start time; roots and their descendants
    segments: set[str] = field(default_factory=set)
    paths: set[str] = field(default_factory=set)
    after_exit: set[str] = field(default_factory=set)  # removed only once the owner process has ended

    def refresh(self) -> None:
        """Adds the current descendants of every live guarded process, and the segments they map."""
        children = parent_map()
        for pid, started in list(self.processes.items()):
            if not alive(pid, started):
                continue
            for child in descendants(pid, children):
                child_start = start_time(child)
                if child_start is not None:
                    self.processes.setdefault(child, child_start)
        for pid, started in self.processes.items():
            if alive(pid, started):
                self.segments |= shm_mappings(pid)

    def sweep(self, grace_s: float = TERM_GRACE_S) -> dict[str, int]:
        """Ends every guarded process and removes what they leave; returns counts (for the log)."""
        self.refresh()
        live = {pid: started for pid, started in self.processes.items() if alive(pid, started)}
        for pid in live:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while live and time.monotonic() < deadline:
            time.sleep(0.05)
            live = {pid: started for pid, started in live.items() if alive(pid, started)}
        for pid, started in live.items():
            if alive(pid, started):
                _signal(pid, signal.SIGKILL)
        removed = 0
        for path in sorted(self.segments):
            try:
                os.unlink(path)
                removed += 1
            except OSError:
                pass
        for pattern in sorted(self.paths):
            for path in glob.glob(pattern) if glob.has_magic(pattern) else [pattern]:
                removed += _remove(path)
        return {"processes": len(self.processes), "killed": len(live), "removed": removed}


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _remove(path: str) -> int:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
        return 1
    except OSError:  # gone already, or not ours to remove
        return 0


def serve(owner: int, commands: int, owner_started: int | None = None, refresh_s: float = REFRESH_S) -> int:
    """The guardian's loop: commands (JSON lines) on fd `commands`, the owner (pid, start time) watched through a
    pidfd."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    guarded = Guarded()
    try:
        owner_fd = os.pidfd_open(owner)
    except ProcessLookupError:
        owner_fd = None
    if owner_fd is not None and owner_started is not None and start_time(owner) != owner_started:
        owner_fd = None  # the owner died, and its pid went to another process, before we watched it
    buffer, reason, grace = b"", "owner exited", TERM_GRACE_S
    os.set_blocking(commands, False)
    while not stop.is_set():
        # The owner may have died before we could watch it: what it handed over is still in the pipe.
        owner_gone = owner_fd is None
        ready, _, _ = select.select([commands] + ([owner_fd] if owner_fd is not None else []), [], [],
                                    0 if owner_gone else refresh_s)
        if owner_fd is not None and owner_fd in ready:
            owner_gone = True
        data = _read_available(commands) if commands in ready or owner_gone else b""
        buffer += data or b""
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            message = json.loads(line)
            if "exit" in message:
                owner_gone, reason, grace = True, "owner closed it", float(message["exit"])
                break
            _apply(guarded, message)
        if owner_gone or data is None:  # None: end of file, every write end is closed
            break
        guarded.refresh()
    counts = guarded.sweep(grace)
    if counts["killed"] or counts["removed"]:
        print(f"rlvr guardian of pid {owner} ({reason}): {counts}", file=sys.stderr, flush=True)
    _remove_after_exit(sorted(guarded.after_exit), owner_fd)
    return 0


def _remove_after_exit(paths: list[str], owner_fd: int | None) -> None:
    """Removes `paths` once the owner has ended: at once if it has, else from a child of the guardian that waits
    for it. An owner exiting normally waits for its guardian (`Guardian.close`) and then still runs the exit
    handlers registered before it, which may write into or remove what is in those paths (wandb's and
    multiprocessing's temp dirs): they must find them there, and nothing they leave may stay."""
    exiting = bool(paths) and owner_fd is not None and not select.select([owner_fd], [], [], 0)[0]
    if exiting:
        if os.fork():
            return  # this guardian ends, so the owner's close() returns; the child waits for the owner
        select.select([owner_fd], [], [])
    for path in paths:
        _remove(path)
    if exiting:
        os._exit(0)


def _read_available(fd: int) -> bytes | None:
    """What the pipe holds now (b"" if nothing); None at end of file."""
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return b"".join(chunks)
        if not data:
            return b"".join(chunks) or None
        chunks.append(data)


def _apply(guarded: Guarded, message: dict) -> None:
    if "processes" in message:  # a tree as the owner saw it: some of it may be gone already, the rest not
        for pid, started in message["processes"]:
            guarded.processes.setdefault(int(pid), int(started))
        guarded.segments.update(message.get("segments", []))
        guarded.refresh()
    elif "path" in message:
        guarded.paths.add(str(message["path"]))
    elif "path_after_exit" in message:
        guarded.after_exit.add(str(message["path_after_exit"]))
    elif "forget_path" in message:
        guarded.paths.discard(str(message["forget_path"]))


# ---------------------------------------------------------------------------------------------- owner side
class Guardian:
    """The owner's handle: one guardian process per owner process (see `guardian()`)."""

    def __init__(self) -> None:
        read_end, self._write_end = os.pipe()
        self.owner = os.getpid()
        self._lock = threading.Lock()
        # The guardian must not see our stdout / stderr pipes as keeping anything alive, nor a terminal's signals.
        # It is not our child either: the process started here forks it and exits, saying its pid. Ray SIGKILLs
        # an actor's direct children when the actor ends (kill_child_processes_on_worker_exit), which took the
        # guardian with them before it could remove anything.
        starter = subprocess.Popen([sys.executable, "-m", "rlvr.lifecycle", str(self.owner),
                                    str(start_time(self.owner)), str(read_end)], pass_fds=(read_end,),
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True)
        os.close(read_end)
        out, _ = starter.communicate()
        self.pid = int(out)
        self.started = start_time(self.pid)

    def guard_process(self, pid: int) -> None:
        # The tree and its segments as they are now: if this process dies before the guardian has read them,
        # parts of the tree may die too (a child watching its stdin) and leave the rest orphaned.
        tree = [(p, start_time(p)) for p in [pid, *descendants(pid)]]
        tree = [(p, started) for p, started in tree if started is not None]
        segments = sorted(set().union(*(shm_mappings(p) for p, _ in tree)))
        if tree:
            self._send({"processes": tree, "segments": segments})

    def guard_path(self, path: str) -> None:
        self._send({"path": str(path)})

    def guard_path_after_exit(self, path: str) -> None:
        self._send({"path_after_exit": str(path)})

    def forget_path(self, path: str) -> None:
        self._send({"forget_path": str(path)})

    def close(self, grace_s: float = TERM_GRACE_S, timeout_s: float = 30.0) -> None:
        """Has the guardian end what it still guards now, and waits for it (the owner is exiting normally)."""
        with self._lock:
            if self._write_end < 0:
                return
            try:
                os.write(self._write_end, json.dumps({"exit": grace_s}).encode() + b"\n")
            except OSError:
                pass
            os.close(self._write_end)
            self._write_end = -1
        deadline = time.monotonic() + timeout_s
        while self.started is not None and alive(self.pid, self.started):
            if time.monotonic() > deadline:
                log.warning("guardian %d did not finish within %.0fs", self.pid, timeout_s)
                return
            time.sleep(0.02)

    def _send(self, message: dict) -> None:
        line = memoryview(json.dumps(message).encode() + b"\n")
        with self._lock:  # whole lines: only this process writes to the pipe, one thread at a time
            while self._write_end >= 0 and line:
                line = line[os.write(self._write_end, line):]


_guardian: Guardian | None = None
_guardian_lock = threading.Lock()


def supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "pidfd_open")


def guardian() -> Guardian | None:
    """This process's guardian, started on first use (a forked child gets its own)."""
    global _guardian
    if not supported():
        return None
    with _guardian_lock:
        if _guardian is None or _guardian.owner != os.getpid():
            _guardian = Guardian()
            atexit.register(close_guardian)
        return _guardian


def guard_process(pid: int) -> None:
    """`pid` and all its descendants end when this process ends (however it ends)."""
    g = guardian()
    if g is None:
        log.warning("no process guardian on %s: pid %d may outlive a killed owner", sys.platform, pid)
        return
    g.guard_process(pid)


def guard_path(path: str) -> None:
    """`path` (a file, a directory, or a glob) is removed when this process ends."""
    g = guardian()
    if g is not None:
        g.guard_path(path)


def guard_path_if_killed(path: str) -> None:
    """`path` is removed when this process ends without running its exit handlers (killed, `os._exit`); at a
    clean exit it is left to the handler that already removes it (multiprocessing's temp dir), which would
    otherwise fail on a path the guardian removed first."""
    guard_path(path)
    g = guardian()
    if g is not None:
        atexit.register(g.forget_path, path)  # after the guardian's own handler, so it runs before it


def guard_path_after_exit(path: str) -> None:
    """`path` is removed once this process has ended, however it ends: after a clean exit's last exit handler,
    not at the guardian's close (`guard_path`), so the handlers registered before the guardian (wandb's and
    multiprocessing's temp dirs) still find what they remove there."""
    g = guardian()
    if g is not None:
        g.guard_path_after_exit(path)


def close_guardian(grace_s: float = TERM_GRACE_S) -> None:
    """Ends what this process's guardian still guards, now; a later `guard_*` starts a new guardian."""
    global _guardian
    with _guardian_lock:
        g, _guardian = _guardian, None
    if g is not None and g.owner == os.getpid():
        g.close(grace_s)
