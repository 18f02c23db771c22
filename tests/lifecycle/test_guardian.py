"""The process guardian (rlvr/lifecycle/guardian.py) with real processes: an owner starts a child that maps a
/dev/shm segment and starts a grandchild; whether the owner exits normally or is SIGKILLed, the guardian ends
the child and the grandchild and removes the segment and the guarded paths. Only this test's own pids and
files are looked at."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from rlvr.lifecycle.guardian import alive, child_pids, start_time
from tests.lifecycle.runwatch import wait_gone

OWNER = r"""
import os, subprocess, sys, time
from rlvr.lifecycle import guard_path, guard_process
child = subprocess.Popen([sys.executable, "-c", '''
import mmap, os, subprocess, sys
name = "/dev/shm/rlvr-test-guardian-%d" % os.getpid()
fd = os.open(name, os.O_CREAT | os.O_RDWR); os.ftruncate(fd, 4096); buf = mmap.mmap(fd, 4096)
grandchild = subprocess.Popen(["sleep", "600"])
print(name, grandchild.pid, flush=True)
sys.stdin.read()  # until the test's end, whatever happens to the owner
'''], stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
segment, grandchild = child.stdout.readline().split()
scratch = sys.argv[2] + "/scratch-%d" % os.getpid()
os.mkdir(scratch)
guard_process(child.pid)
guard_path(sys.argv[2] + "/scratch-*")
print(child.pid, grandchild, segment, scratch, flush=True)
if sys.argv[1] == "exit":
    sys.exit(0)
time.sleep(600)
"""


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_what_the_owner_started_ends_with_it(tmp_path, how):
    owner = subprocess.Popen([sys.executable, "-c", OWNER, how, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    child, grandchild, segment, scratch = owner.stdout.readline().split()
    started = {int(pid): start_time(int(pid)) for pid in (child, grandchild)}
    try:
        assert os.path.exists(segment) and os.path.isdir(scratch)
        if how == "sigkill":
            owner.send_signal(signal.SIGKILL)
        owner.wait(60)
        # The guardian unlinks after the processes are gone: wait for both, not just the processes.
        left = wait_gone(started, timeout_s=30, also=lambda: os.path.exists(segment) or os.path.exists(scratch))
        assert not left, f"still alive after the owner ended: {left}"
        assert not os.path.exists(segment) and not os.path.exists(scratch)
    finally:
        for pid, t in started.items():
            if alive(pid, t):
                os.kill(pid, signal.SIGKILL)
        if os.path.exists(segment):
            os.unlink(segment)


POOL_OWNER = r"""
import multiprocessing.util, sys, time
from rlvr.workers.rewards.process_pool import KillableProcessPool
if __name__ == "__main__":
    pool = KillableProcessPool(1)
    print(multiprocessing.util.get_temp_dir(), flush=True)
    if sys.argv[1] == "exit":
        pool.close()
        sys.exit(0)
    time.sleep(600)
"""


@pytest.mark.parametrize("how", ["exit", "sigkill", "killed_like_ray"])
def test_a_process_pool_leaves_no_multiprocessing_temp_dir(tmp_path, how):
    """The forkserver's socket lives in the owner's multiprocessing temp dir (/tmp/pymp-*), which Python removes
    only at a clean exit: a killed reward actor left one per run. Either way it goes now, also when the owner's
    direct children are SIGKILLed with it, as Ray does with an actor's (which took the guardian with them when it
    was one), and a clean exit prints no error (multiprocessing's own removal and the guardian's do not race)."""
    script = tmp_path / "owner.py"
    script.write_text(POOL_OWNER)
    owner = subprocess.Popen([sys.executable, str(script), how], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    temp_dir = owner.stdout.readline().strip()
    assert os.path.isdir(temp_dir)
    if how != "exit":
        children = child_pids(owner.pid) if how == "killed_like_ray" else []
        assert how == "sigkill" or children, "the pool's forkserver should be a child of the owner"
        for pid in [owner.pid, *children]:
            os.kill(pid, signal.SIGKILL)
    owner.wait(60)
    assert wait_gone({}, timeout_s=30, also=lambda: os.path.exists(temp_dir)) == [] and not os.path.exists(temp_dir)
    if how == "exit":
        assert owner.returncode == 0 and "Traceback" not in owner.stderr.read()


AFTER_EXIT_OWNER = r"""
import atexit, os, sys, time
scratch = sys.argv[2] + "/run-tmp"
os.mkdir(scratch)

def late():  # registered before the guardian starts, so it runs after the guardian's close, as wandb's do
    time.sleep(0.5)
    with open(scratch + "/late", "w") as f:  # raises if the directory is gone already
        f.write("x")
    print("the late handler wrote", flush=True)

atexit.register(late)
from rlvr.lifecycle.guardian import guard_path_after_exit
guard_path_after_exit(scratch)
print(scratch, flush=True)
if sys.argv[1] == "exit":
    sys.exit(0)
time.sleep(600)
"""


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_a_path_guarded_after_exit_outlives_the_owners_last_exit_handler(tmp_path, how):
    """A run's temp dir (rlvr/lifecycle/run_tmpdir.py) holds what exit handlers registered before the guardian
    remove or write (wandb's temp dirs): at a clean exit it must still be there when they run, and gone after; a
    killed owner runs none, and it is gone at once."""
    owner = subprocess.Popen([sys.executable, "-c", AFTER_EXIT_OWNER, how, str(tmp_path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    scratch = owner.stdout.readline().strip()
    assert os.path.isdir(scratch)
    if how == "sigkill":
        owner.send_signal(signal.SIGKILL)
    out, err = owner.communicate(timeout=60)
    assert wait_gone({}, timeout_s=30, also=lambda: os.path.exists(scratch)) == [] and not os.path.exists(scratch)
    if how == "exit":
        assert owner.returncode == 0 and "Traceback" not in err, err
        assert "the late handler wrote" in out
