"""Several commands run at the same time, for tests whose subprocesses spend most of their seconds importing or
starting a Ray of their own: on two cores they overlap well, one after the other they add up."""

from __future__ import annotations

import subprocess
from typing import Hashable, TypeVar

K = TypeVar("K", bound=Hashable)


def run_at_once(commands: dict[K, list[str]], timeout_s: float, **popen_kwargs) -> dict[K, subprocess.CompletedProcess]:
    """Each command's exit code, stdout and stderr (text), by key; started together, waited for in order. A command
    still running at its timeout raises TimeoutExpired, and none of them is left running."""
    procs = {key: subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen_kwargs)
             for key, argv in commands.items()}
    try:
        out = {}
        for key, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=timeout_s)
            out[key] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        return out
    finally:
        for proc in procs.values():
            proc.kill()  # one that hung past its timeout (a no-op for those that ended)
            proc.wait()
