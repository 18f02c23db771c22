"""KillableProcessPool: results and errors come back, hung or dying workers are replaced.

The functions sent to the pool come from the standard library: a worker can import them wherever it starts.
"""

import asyncio
import ctypes
import functools
import multiprocessing
import operator
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr.workers.rewards.process_pool import WORKER_NAME, KillableProcessPool, RemoteCallError, RewardTimeoutError


@pytest.fixture
def pool():
    pool = KillableProcessPool(1)
    yield pool
    pool.close()


def run(pool, fn, *args, timeout_s=5.0):
    return asyncio.run(pool.run(fn, *args, timeout_s=timeout_s))


def test_returns_the_result(pool):
    assert run(pool, operator.add, 2, 3) == 5
    assert run(pool, os.getpid) != os.getpid()


def test_exception_is_raised_in_the_caller(pool):
    with pytest.raises(RemoteCallError) as info:
        run(pool, int, "not a number")
    assert info.value.remote_type == "ValueError"
    assert "invalid literal" in str(info.value)
    assert run(pool, operator.add, 1, 1) == 2


def test_timeout_kills_the_worker_and_the_pool_recovers(pool):
    first_pid = run(pool, os.getpid)
    start = time.perf_counter()
    with pytest.raises(RewardTimeoutError):
        run(pool, time.sleep, 30, timeout_s=0.5)
    assert time.perf_counter() - start < 15  # killed at the deadline, not after the 30 s sleep
    assert run(pool, operator.add, 2, 2) == 4
    assert run(pool, os.getpid) != first_pid


@pytest.mark.parametrize(
    "fn, args, exitcode",
    [(os._exit, (3,), 3), (ctypes.string_at, (0,), -11)],  # string_at(0) reads address 0: a segfault
    ids=["os._exit", "segfault"],
)
def test_dying_worker_is_reported_and_replaced(pool, fn, args, exitcode):
    with pytest.raises(RemoteCallError) as info:
        run(pool, fn, *args)
    assert info.value.remote_type == "WorkerDied"
    assert f"exit code {exitcode}" in str(info.value)
    assert run(pool, operator.mul, 3, 4) == 12


def test_callers_queue_for_free_workers():
    pool = KillableProcessPool(2)

    async def many():
        await asyncio.gather(*(pool.run(os.getpid, timeout_s=30) for _ in range(2)))  # both workers up
        start = time.perf_counter()
        await asyncio.gather(*(pool.run(time.sleep, 0.2, timeout_s=5) for _ in range(6)))
        return time.perf_counter() - start

    try:
        elapsed = asyncio.run(many())
    finally:
        pool.close()
    assert elapsed > 0.55  # three rounds of two, not six at once


def test_cancelled_call_does_not_leak_its_answer(pool):
    async def cancel_then_call():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(pool.run(time.sleep, 5, timeout_s=10), timeout=0.3)
        # The busy worker was replaced: this call must get its own answer, not the sleep's None.
        return await pool.run(operator.add, 10, 20, timeout_s=5)

    start = time.perf_counter()
    assert asyncio.run(cancel_then_call()) == 30
    assert time.perf_counter() - start < 3.0


def test_failing_initializer_is_reported():
    pool = KillableProcessPool(1, initializer=functools.partial(int, "x"))
    try:
        with pytest.raises(RemoteCallError, match="initializer failed"):
            run(pool, operator.add, 1, 1)
    finally:
        pool.close()


def test_close_stops_workers():
    pool = KillableProcessPool(1)
    pid = run(pool, os.getpid)
    pool.close()
    with pytest.raises(RuntimeError):
        run(pool, os.getpid)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def pool_workers() -> set[int]:
    """This process's live pool workers (by name: another test's engine may be starting its own children)."""
    return {p.pid for p in multiprocessing.active_children() if p.name == WORKER_NAME}


def test_close_during_a_call_leaves_no_process():
    before = pool_workers()
    pool = KillableProcessPool(1)

    async def close_while_busy():
        await pool.run(os.getpid, timeout_s=30)
        call = asyncio.create_task(pool.run(time.sleep, 10, timeout_s=30))
        await asyncio.sleep(0.2)
        pool.close()
        with pytest.raises(RemoteCallError, match="WorkerDied"):
            await call

    asyncio.run(close_while_busy())
    assert pool_workers() <= before  # nothing respawned


ORPHAN_SCRIPT = """
import asyncio, os, time
from rlvr.workers.rewards.process_pool import KillableProcessPool

async def main():
    pool = KillableProcessPool(1)
    print(await pool.run(os.getpid, timeout_s=60), flush=True)
    await pool.run(time.sleep, 60, timeout_s=60)

asyncio.run(main())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses PR_SET_PDEATHSIG and /proc")
def test_busy_worker_dies_with_its_owner():
    repo = Path(__file__).resolve().parents[2]
    owner = subprocess.Popen([sys.executable, "-c", ORPHAN_SCRIPT], stdout=subprocess.PIPE, text=True, cwd=repo)
    worker_pid = int(owner.stdout.readline())
    time.sleep(0.3)  # the sleep call is now in flight
    owner.kill()  # SIGKILL: no cleanup code runs in the owner
    owner.wait()
    deadline = time.monotonic() + 10
    while _alive(worker_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker_pid)


def _alive(pid):
    """Running or sleeping; a zombie (dead, waiting to be reaped by whoever adopted it) counts as dead."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
