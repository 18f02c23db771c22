"""A scheduler that died, restored from the snapshot its step started from: the prompts the trainer already got
are not handed over again, the others all are, in flight or in the carry-over buffer, and the data position
ends where the uninterrupted run's does (fast fake engine; the Ray-level fault is in tests/chaos)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from rlvr.schedulers.dynamic_sampling import DynamicSamplingScheduler, SchedulerRestarted
from tests.helpers.fakes import prompt
from tests.unit.test_scheduler import MIXED, make


def data():
    # p0 and p1 finish fast, p2 and p3 slowly: the "crash" comes between
    delays = [5, 5, 300, 300] + [5] * 6
    return [prompt(f"p{i}", MIXED, gen_delay_ms=d) for i, d in enumerate(delays)]


async def take(scheduler, step: int, count: int) -> list[str]:
    got: list[str] = []
    while len(got) < count:
        groups, final = await scheduler.next_groups(step)
        got += [g.prompt.uid for g in groups]
        if final is not None:
            break
    return got


def test_restored_scheduler_hands_over_exactly_what_the_trainer_still_lacks():
    dead, _ = make(data())
    twin, _ = make(data())  # the same data and workers
    # What Ray's restart looks like from inside the actor: the constructor again, without data or workers
    # (DomainSchedulers attaches them by a call), and restarted
    reborn = DynamicSamplingScheduler("d", None, None, [], [], twin.cfg)
    reborn.restored = False

    async def scenario():
        snapshot = await dead.start_batch(4, 0, 0)
        handed = await take(dead, 0, 2)  # the fast two reach the trainer; then the actor "dies"
        for refused in (reborn.start_batch(2, 0, 0), reborn.validate(0), reborn.reward_worker_metrics()):
            with pytest.raises(SchedulerRestarted, match="awaits its data and workers"):
                await refused  # neither work nor validation before it is attached
        reborn.attach(twin.train_prompts, twin.val_prompts, twin.infer, twin.rewards)
        with pytest.raises(SchedulerRestarted, match="awaits its state"):
            await reborn.start_batch(2, 0, 0)  # nor work before it is restored
        given = reborn.restore(snapshot, handed)
        reborn._order = list(range(10))  # the same data order as the dead one (make() fixes it for the test)
        await reborn.start_batch(4 - len(handed), 0, 0)
        rest = await take(reborn, 0, 2)
        return handed, rest, given

    handed, rest, given = asyncio.run(scenario())
    assert sorted(handed) == ["p0", "p1"] and sorted(rest) == ["p2", "p3"]
    assert given == {"requeued": 0, "buffer": 0, "skipped": 2}
    assert (reborn.epoch, reborn.pos) == (0, 4)  # where the uninterrupted run would be


def test_prompts_pending_at_the_snapshot_come_back_first_and_buffer_survives():
    scheduler, _ = make([prompt(f"p{i}", MIXED) for i in range(10)])
    scheduler.pos = 5  # p0..p4 taken before the snapshot:
    scheduler.pending = {"g3": prompt("p3", MIXED), "g4": prompt("p4", MIXED)}  # two still in flight,
    groups, _ = asyncio.run(make([prompt("p2", MIXED)])[0].get_batch(1, 0, 0))
    scheduler._carry(groups[0], 0, Counter())  # one finished, in the buffer
    snapshot = scheduler.snapshot()

    reborn, _ = make([prompt(f"p{i}", MIXED) for i in range(10)])
    # since the snapshot the trainer got p4 (from the pending ones) and p6 (from the cursor)
    assert reborn.restore(snapshot, ["p4", "p6"]) == {"requeued": 1, "buffer": 1, "skipped": 1}
    assert [c.group.prompt.uid for c in reborn.buffer] == ["p2"]
    reborn._order = list(range(10))  # data order as given (restore draws the epoch's permutation again)
    order = [reborn._next_prompt().uid for _ in range(4)]
    assert order == ["p3", "p5", "p7", "p8"]  # the pending one first, then the cursor without p6
