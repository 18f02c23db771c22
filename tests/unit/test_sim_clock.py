"""The simulator's virtual clock and runtime (rlvr/sim/clock.py): simulated seconds pass only when every task
waits, deadlines fire in simulated time, a deadlock is reported instead of hanging, and the driver-side
get/wait behave as Ray's."""

from __future__ import annotations

import asyncio

import pytest

from rlvr.sim.clock import SimRuntime, SimulationDeadlock, VirtualClockLoop


def test_sleeps_jump_the_clock_without_waiting():
    loop = VirtualClockLoop()
    try:
        async def scenario():
            await asyncio.gather(asyncio.sleep(3600), asyncio.sleep(60))
            return loop.time()

        assert loop.run_until_complete(scenario()) == pytest.approx(3600)  # an hour of loop time, at once
    finally:
        loop.close()


def test_a_deadline_fires_in_simulated_time():
    loop = VirtualClockLoop()
    try:
        async def scenario():
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(asyncio.sleep(500), timeout=120)
            return loop.time()

        assert loop.run_until_complete(scenario()) == pytest.approx(120)
    finally:
        loop.close()


def test_a_wait_that_nothing_can_end_is_a_deadlock_not_a_hang():
    runtime = SimRuntime()
    try:
        never = runtime.loop.create_future()
        with pytest.raises(SimulationDeadlock):
            runtime.get(never)
    finally:
        runtime.close()


class _Worker:
    async def slow(self, seconds, value):
        await asyncio.sleep(seconds)
        return value

    def plain(self, value):
        return value * 2


def test_runtime_get_and_wait_follow_ray():
    runtime = SimRuntime()
    try:
        worker = runtime.actor(_Worker())
        refs = [worker.slow.remote(5, "a"), worker.slow.remote(1, "b"), worker.plain.remote(4)]
        ready, rest = runtime.wait(refs, num_returns=2)
        assert [runtime.get(r) for r in ready] == ["b", 8]  # the first two done, in the order given
        assert rest == [refs[0]] and runtime.now() == pytest.approx(1)
        assert runtime.get(refs) == ["a", "b", 8] and runtime.now() == pytest.approx(5)
        assert runtime.get([]) == []
        # between two waits the driver's own code takes no simulated time
        assert runtime.now() == pytest.approx(5)
    finally:
        runtime.close()


def test_close_cancels_what_is_still_running():
    runtime = SimRuntime()
    ref = runtime.actor(_Worker()).slow.remote(10, "x")
    runtime.close()
    assert ref.cancelled() and runtime.loop.is_closed()


# ---------------------------------------------------------------------- the driver's Waiter on the simulated runtime
def test_waiter_gets_one_ref_or_a_list_in_simulated_time():
    from rlvr.runtime.waiter import Waiter

    runtime = SimRuntime()
    try:
        waiter, worker = Waiter(timeout_s=100, poll_s=1.0, runtime=runtime), runtime.actor(_Worker())
        assert waiter.get(worker.slow.remote(30, "one"), "a single ref") == "one"  # not taken for a list
        assert waiter.get([worker.slow.remote(5, "a"), worker.plain.remote(2)], "a list") == ["a", 4]
        refs = [worker.slow.remote(7, "late"), worker.slow.remote(2, "early")]
        assert waiter.first(refs, "the first") is refs[1]
        assert runtime.now() == pytest.approx(37)
    finally:
        runtime.close()


def test_waiter_deadline_and_supervision_ticks_run_in_simulated_seconds():
    from rlvr.runtime.waiter import DeadlineExceeded, Waiter

    runtime = SimRuntime()
    try:
        waiter, ticks = Waiter(timeout_s=60, poll_s=10.0, runtime=runtime), []
        waiter.supervise_with(lambda: ticks.append(runtime.now()))
        with pytest.raises(DeadlineExceeded, match="a hung call: no result within 60s"):
            waiter.get(runtime.actor(_Worker()).slow.remote(3600, "never"), "a hung call")
        assert runtime.now() == pytest.approx(60)  # an hour's call cut at the deadline, in no wall time
        assert ticks == pytest.approx([10, 20, 30, 40, 50])  # the supervisor ticked every poll_s while waiting
        waiter.pause(25)
        assert runtime.now() == pytest.approx(85)
    finally:
        runtime.close()
