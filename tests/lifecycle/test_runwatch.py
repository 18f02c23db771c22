"""The watcher behind tests/lifecycle/test_nothing_left_behind.py keeps a process's title through its end. A
process on its way out releases its memory before its state reads as a zombie, and in between its
/proc/<pid>/cmdline reads empty while its start time still matches: a run that ended normally must still show
that it started vLLM's "VLLM::EngineCore" (a CI run failed once for want of this)."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.lifecycle.runwatch import RunWatch, _cmdline

RENAMED = "import setproctitle, sys; setproctitle.setproctitle('VLLM::EngineCore'); sys.stdin.read()"


def test_a_title_is_kept_through_the_exit_and_renames_are_followed():
    watch = RunWatch.__new__(RunWatch)  # its bookkeeping only: no run is started
    watch.processes = {}
    child = subprocess.Popen([sys.executable, "-c", RENAMED], stdin=subprocess.PIPE)
    try:
        watch._record(child.pid, _cmdline(child.pid))  # most likely still the interpreter's own command line
        deadline = time.monotonic() + 30
        while not _cmdline(child.pid).startswith("VLLM::") and time.monotonic() < deadline:
            time.sleep(0.05)
        watch._record(child.pid, _cmdline(child.pid))
        assert watch.processes[child.pid][1] == "VLLM::EngineCore"  # the rename is followed
        for unreadable in ("", "?"):  # memory released on the way out; /proc unreadable
            watch._record(child.pid, unreadable)
            assert watch.processes[child.pid][1] == "VLLM::EngineCore"
        child.stdin.close()
        child.wait(30)
        watch._record(child.pid, _cmdline(child.pid))  # gone: nothing recorded over it
        assert watch.processes[child.pid][1] == "VLLM::EngineCore"
    finally:
        child.kill()
        child.wait()
