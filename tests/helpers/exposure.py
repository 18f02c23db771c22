"""Secrets and exposure of a whole CLI run, watched from outside while it runs (tests/e2e/test_main_command.py):

- a judge API key given through its environment variable (a canary) must appear in no file the run writes: the run
  directory (metrics, val samples, checkpoints, TensorBoard, W&B offline files), the console, the judge server's
  logs (read while they exist: a temporary directory of the server's) and the Ray session's logs;
- the servers rlvr starts (judge, sandbox) must listen on loopback only.

`ExposureProbe.poll` is called from the watcher's loop; the checks run on what it recorded once the run ended."""

from __future__ import annotations

import mmap
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil

# psutil's per-process socket listing reads /proc/<pid>/net for each of ~30 processes: once a second is plenty to
# see servers that listen for minutes, and leaves the run its CPU.
PROBE_EVERY_S = 1.0


def new_canary() -> str:
    return f"sk-rlvr-canary-{uuid.uuid4().hex}"


def contains(path: Path, needle: bytes) -> bool:
    """Whether the file holds `needle`, without reading a checkpoint of a gigabyte into memory."""
    if path.stat().st_size == 0:
        return False
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return m.find(needle) >= 0


def files_under(*roots: Path) -> list[Path]:
    """Every file under the folders of `roots`, and those of `roots` that are files."""
    return [p for root in roots if root.exists() for p in ([root] if root.is_file() else root.rglob("*"))
            if p.is_file()]


# The local judge server is rlvr's own (transformers) or vLLM's OpenAI server, whichever `judge_server` picks.
JUDGE_COMMANDS = ("rlvr.judge_server", "vllm.entrypoints.openai.api_server")


def role_of(cmd: str, name: str) -> str:
    if any(c in cmd for c in JUDGE_COMMANDS):
        return "judge"
    return "sandbox" if "sandbox.server" in cmd else name


@dataclass
class ExposureProbe:
    canary: str
    listening: dict[tuple[int, str], set[tuple[str, int]]] = field(default_factory=dict)  # (pid, role) -> addrs
    judge_logs: set[Path] = field(default_factory=set)
    session_dirs: set[Path] = field(default_factory=set)  # the Ray session's directory (its logs stay there)
    key_holders: set[int] = field(default_factory=set)  # reward workers that ran with the key: not vacuous
    leaked: set[Path] = field(default_factory=set)  # judge-server logs seen holding the key while they existed
    _last: float = -PROBE_EVERY_S

    def poll(self, pids: list[int]) -> None:
        """Looks at the run's process tree (`pids`, as RunWatch just listed it)."""
        if time.monotonic() - self._last < PROBE_EVERY_S:
            return
        self._last = time.monotonic()
        for pid in pids:
            try:
                self._look_at(psutil.Process(pid))
            except psutil.Error:  # gone, or a zombie, between the listing and the look
                continue
        for log in self.judge_logs:
            if log.exists() and contains(log, self.canary.encode()):
                self.leaked.add(log)

    def _look_at(self, p: psutil.Process) -> None:
        cmd = " ".join(p.cmdline())
        role = role_of(cmd, p.name())
        for c in p.net_connections(kind="inet"):
            if c.status == psutil.CONN_LISTEN:
                self.listening.setdefault((p.pid, role), set()).add((c.laddr.ip, c.laddr.port))
        if role == "judge":
            self.judge_logs.update(Path(f.path) for f in p.open_files() if f.path.endswith(".log"))
        if "--raylet_socket_name=" in cmd:
            sock = cmd.split("--raylet_socket_name=")[1].split()[0]
            self.session_dirs.add(Path(sock).parents[1])
        if role.startswith("ray::RewardActor") and self.canary in p.environ().get("RLVR_JUDGE_API_KEY", ""):
            self.key_holders.add(p.pid)

    def written_files(self, *own: Path) -> list[Path]:
        """The run's own files (`own`: its run directory, its console log) and its Ray session's logs."""
        return files_under(*own, *(d / "logs" for d in self.session_dirs))

    def files_holding_the_key(self, files: list[Path]) -> list[Path]:
        return [p for p in files if p.exists() and contains(p, self.canary.encode())]
