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
