"""The scheduler's streaming interface (start_batch / next_groups / wait_generated), on the fast fake engine:
groups handed over as they complete, two steps in flight at once, the non-streaming reward barrier, cancel,
and checkpoints taken while a step is in flight."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers.fakes import prompt
from tests.unit.test_scheduler import MIXED, make


def test_groups_stream_in_completion_order_then_metrics():
    # generation delays (ms) make p2 finish first, then p0, then p1
    data = [prompt("p0", MIXED, gen_delay_ms=60), prompt("p1", MIXED, gen_delay_ms=150),
            prompt("p2", MIXED, gen_delay_ms=5)]
    scheduler, _ = make(data)

    async def scenario():
        await scheduler.start_batch(3, 0, 0)
        order, final = [], None
        while final is None:
            groups, final = await scheduler.next_groups(0)
            order += [g.prompt.uid for g in groups]
        return order, final

    order, metrics = asyncio.run(scenario())
    assert order == ["p2", "p0", "p1"]
    assert metrics["d/scheduler/groups_kept"] == 3 and 0 not in scheduler.runs


def test_two_steps_in_flight_keep_their_own_groups_and_counters():
    data = [prompt(f"p{i}", MIXED, gen_delay_ms=20) for i in range(6)]
    scheduler, _ = make(data)

    async def scenario():
        await scheduler.start_batch(2, 0, 0)
        await scheduler.start_batch(3, 1, 0)  # the next step, started before step 0 is taken
        results = {}
        for step in (1, 0):
            groups, final = [], None
            while final is None:
                more, final = await scheduler.next_groups(step)
                groups += more
            results[step] = (groups, final)
        return results

    results = asyncio.run(scenario())
    # equal generation delays: the groups of a step arrive in any order, but each step holds only its own
    assert sorted(g.prompt.uid for g in results[0][0]) == ["p0", "p1"]
    assert sorted(g.prompt.uid for g in results[1][0]) == ["p2", "p3", "p4"]
    assert results[0][1]["d/scheduler/prompts_started"] == 2 and results[1][1]["d/scheduler/prompts_started"] == 3
    assert all(s.policy_version == 0 for g in results[1][0] for s in g.samples)


def test_without_streaming_no_reward_leaves_before_the_step_generated():
    # p0 generates in 5 ms, p1 in 300 ms: with streaming, p0's rewards are in long before p1 is generated
    data = [prompt("p0", MIXED, gen_delay_ms=5), prompt("p1", MIXED, gen_delay_ms=300)]

    async def first_reward_after_start(streaming: bool) -> float:
        scheduler, _ = make(data, overlap={"streaming_rewards": streaming})
        sent = []
        score = scheduler._score

        async def recording(sample, lane="train", run=None):
            sent.append(asyncio.get_running_loop().time())
            return await score(sample, lane, run)

        scheduler._score = recording
        start = asyncio.get_running_loop().time()
        await scheduler.start_batch(2, 0, 0)
        await scheduler.wait_generated(0)
        generated = asyncio.get_running_loop().time() - start
        while (await scheduler.next_groups(0))[1] is None:
            pass
        return min(sent) - start, generated

    streamed, generated = asyncio.run(first_reward_after_start(True))
    assert streamed < 0.2 <= generated
    batched, generated = asyncio.run(first_reward_after_start(False))
    assert batched >= generated - 0.01  # the first request left only once the whole step was generated


def test_cancel_aborts_a_step_that_will_not_be_trained():
    data = [prompt(f"p{i}", MIXED, gen_delay_ms=2000) for i in range(3)]
    scheduler, infer = make(data)

    async def scenario():
        await scheduler.start_batch(3, 5, 5)
        await asyncio.sleep(0.05)
        await asyncio.wait_for(scheduler.cancel_batch(5), timeout=1)

    asyncio.run(scenario())
    assert 5 not in scheduler.runs and len(infer.aborted) == 3


def test_checkpoint_during_an_inflight_step_gives_its_prompts_back():
    data = [prompt(f"p{i}", MIXED, gen_delay_ms=1) for i in range(8)]
    scheduler, _ = make(data)

    async def scenario():
        groups, _ = await scheduler.get_batch(2, 0, 0)  # step 0 trained: cursor 2
        await scheduler.start_batch(2, 1, 0)  # step 1 started ahead (off-policy), not trained yet
        state = scheduler.state_dict()
        await scheduler.cancel_batch(1)
        return state

    state = asyncio.run(scenario())
    assert (state["epoch"], state["pos"]) == (0, 2)  # p2, p3 come back on resume


def test_a_failing_step_reaches_the_trainer_as_an_error_not_a_hang():
    data = [prompt("p0", MIXED)]
    scheduler, _ = make(data)

    async def broken(run, version):
        raise RuntimeError("injected collection failure")

    scheduler._collect_groups = broken

    async def scenario():
        await scheduler.start_batch(1, 0, 0)
        return await asyncio.wait_for(scheduler.next_groups(0), timeout=2)

    with pytest.raises(RuntimeError, match="injected"):
        asyncio.run(scenario())
