"""DynamicSamplingScheduler on a fast fake engine: quotas, refill, carry-over, staleness, abort, admission."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from rlvr.config.load import config_from_dict
from rlvr.schedulers.dynamic_sampling import DynamicSamplingScheduler
from tests.helpers.fakes import FakeInferWorkerForTest, LocalHandle, RewardHandleForTest, ScriptedRewardForTest, prompt

MIXED, ALL_RIGHT, ALL_WRONG = [1, 0, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]


def make(prompts, infer=None, domain="d", overlap=None, **rollout):
    cfg = config_from_dict({
        "data": {"train_files": ["unused.jsonl"]},
        "domains": {domain: {"reward": {"worker": "tests.helpers.fakes.ScriptedRewardForTest"}}},
        "rollout": {"group_size": 4, **rollout},
        "overlap": overlap or {},
    })
    infer = infer or FakeInferWorkerForTest()
    reward = RewardHandleForTest(ScriptedRewardForTest(domain))
    scheduler = DynamicSamplingScheduler(domain, prompts, [], [LocalHandle(infer)], [LocalHandle(reward)], cfg)
    scheduler._order = list(range(len(prompts)))  # data order as given, so the test knows what comes next
    return scheduler, infer


def batch(scheduler, n, step=0):
    return asyncio.run(scheduler.get_batch(n, step, step))


def test_exact_quota_without_filters():
    scheduler, _ = make([prompt(f"p{i}", ALL_WRONG) for i in range(10)])
    groups, m = batch(scheduler, 3)
    assert len(groups) == 3 and all(len(g.samples) == 4 for g in groups)
    assert m["d/scheduler/prompts_started"] == 3 and m["d/scheduler/groups_kept"] == 3
    assert m["d/scheduler/quota_shortfall"] == 0 and m["d/reward/status/ok"] == 12


def test_drops_are_counted_by_reason_and_refilled():
    data = [prompt("a", ALL_RIGHT), prompt("b", MIXED), prompt("c", ALL_WRONG), prompt("d", ALL_WRONG),
            prompt("e", MIXED), prompt("f", MIXED)]
    scheduler, _ = make(data, filter={"zero_spread": True})
    groups, m = batch(scheduler, 2)
    assert sorted(g.prompt.uid for g in groups) == ["b", "e"]
    assert m["d/filter/dropped_all_correct"] == 1 and m["d/filter/dropped_all_wrong"] == 2
    assert m["d/scheduler/prompts_started"] == 5  # 2 first, then one replacement per drop
    assert m["d/scheduler/refill_rounds"] >= 1 and m["d/scheduler/quota_shortfall"] == 0


def test_mean_band_and_user_filter():
    data = [prompt("lo", [1, 0, 0, 0]), prompt("mid", MIXED), prompt("hi", [1, 1, 1, 0]), prompt("mid2", MIXED)]
    scheduler, _ = make(data, filter={"mean_band": [0.3, 0.7]})
    groups, m = batch(scheduler, 2)
    assert sorted(g.prompt.uid for g in groups) == ["mid", "mid2"] and m["d/filter/dropped_band"] == 2

    scheduler, _ = make(data, filter={"user_fn": "tests.unit.test_scheduler.reject_lo"})
    groups, m = batch(scheduler, 3)
    assert "lo" not in [g.prompt.uid for g in groups] and m["d/filter/dropped_user_low_start"] == 1


def reject_lo(group):
    return "low_start" if group.prompt.uid == "lo" else True


def test_every_group_filtered_stops_after_bounded_rounds():
    scheduler, _ = make([prompt(f"p{i}", ALL_WRONG) for i in range(50)], filter={"zero_spread": True},
                        max_refill_rounds=3)
    groups, m = asyncio.run(asyncio.wait_for(scheduler.get_batch(2, 0, 0), timeout=10))
    assert groups == []
    assert m["d/scheduler/prompts_started"] == 2 + 2 * 3  # each initial prompt has a chain of 3 replacements
    assert m["d/filter/dropped_all_wrong"] == 8
    assert m["d/scheduler/quota_shortfall"] == 2 and m["d/scheduler/refill_exhausted"] == 2


def test_surplus_being_scored_carries_over_and_surplus_generating_is_aborted():
    data = [prompt("fast1", MIXED, gen_delay_ms=30), prompt("fast2", MIXED, gen_delay_ms=30),
            # generated first, still being scored when the fast two are in: 2 s, not 0.3, since a fresh clone's
            # run once took longer than 0.3 s to score the fast two (a stall of the loop, not the scheduler)
            prompt("scoring", MIXED, gen_delay_ms=1, reward_delay_s=2.0),
            prompt("slow", MIXED, gen_delay_ms=8000),  # still generating when the quota is met
            prompt("next", MIXED)]
    scheduler, infer = make(data, oversample_frac=1.0)

    async def scenario():
        groups, m0 = await scheduler.get_batch(2, 0, 0)
        await asyncio.sleep(2.5)  # the scored surplus lands in the buffer in the background
        groups1, m1 = await scheduler.get_batch(2, 1, 1)
        return groups, m0, groups1, m1

    groups, m0, groups1, m1 = asyncio.run(asyncio.wait_for(scenario(), timeout=20))
    assert sorted(g.prompt.uid for g in groups) == ["fast1", "fast2"]
    assert m0["d/scheduler/prompts_started"] == 4 and m0["d/scheduler/aborted"] == 1
    assert any("slow" in r for r in infer.aborted)
    assert m0["d/scheduler/finishing_late"] == 1  # "scoring": counted again in the step it lands in
    assert m1["d/scheduler/carried_over"] >= 1
    # step 1: the carried group is used first (age 1), a new prompt tops the quota up
    assert [g.prompt.uid for g in groups1] == ["scoring", "next"]
    assert m1["d/scheduler/carried_used"] == 1 and m1["d/scheduler/carry_age_mean"] == 1.0
    assert m1["d/scheduler/prompts_started"] == 2  # the missing one, plus one oversampled


def test_stale_carried_groups_are_dropped():
    scheduler, _ = make([prompt(f"p{i}", MIXED) for i in range(10)], max_carry_staleness=1)
    groups, _ = batch(scheduler, 3, step=0)
    scheduler._carry(groups[0], 0, Counter())  # surplus from step 0
    _, m = batch(scheduler, 1, step=2)  # two steps later: too old
    assert m["d/filter/dropped_stale"] == 1 and m["d/scheduler/carried_used"] == 0


def test_full_batch_refill_without_carry_over_discards_surplus():
    data = [prompt("w1", ALL_WRONG), prompt("m1", MIXED), prompt("w2", ALL_WRONG), prompt("m2", MIXED),
            prompt("m3", MIXED), prompt("m4", MIXED)]
    scheduler, _ = make(data, filter={"zero_spread": True}, refill="full_batch", carry_over=False)
    groups, m = batch(scheduler, 3)
    # round 0: w1 m1 w2 (one kept); round 1: a whole quota of 3 (m2 m3 m4): two fill the quota, one is surplus
    assert m["d/scheduler/prompts_started"] == 6 and len(groups) == 3
    assert m["d/scheduler/discarded_surplus"] == 1 and scheduler.buffer == []


def test_admission_cap_holds_across_domains():
    infer = FakeInferWorkerForTest(cap=3)
    a, _ = make([prompt(f"a{i}", MIXED, gen_delay_ms=20) for i in range(8)], infer=infer, domain="a")
    b, _ = make([prompt(f"b{i}", MIXED, gen_delay_ms=20) for i in range(8)], infer=infer, domain="b")

    async def both():
        return await asyncio.gather(a.get_batch(5, 0, 0), b.get_batch(5, 0, 0))

    (ga, _), (gb, _) = asyncio.run(asyncio.wait_for(both(), timeout=10))
    assert len(ga) == 5 and len(gb) == 5
    assert max(infer.trace) == 3  # reached, never exceeded, although 10 requests arrived at once
    assert infer.admission.in_flight == 0 and not infer.admission.waiting


def test_state_dict_round_trip_keeps_cursor_and_buffer():
    data = [prompt(f"p{i}", MIXED) for i in range(5)]
    scheduler, _ = make(data)
    groups, _ = batch(scheduler, 2)
    scheduler._carry(groups[0], 0, Counter())
    state = scheduler.state_dict()
    restored, _ = make(data)
    restored.load_state_dict(state)
    assert (restored.epoch, restored.pos) == (0, 2) and len(restored.buffer) == 1


@pytest.mark.parametrize("length, expected", [(6, 0.0), (7, -0.25), (8, -0.5), (9, -0.5)])
def test_overlong_shaping_applied_to_rewards(length, expected):
    cfg_overrides = {"group_size": 4}
    scheduler, infer = make([prompt("p", [1, 1, 1, 1])], **cfg_overrides)
    scheduler.overlong = (8, 2, 0.5)  # L_max 8, L_cache 2, factor 0.5 (as algorithm.overlong_* would set)
    infer.response_len = length
    groups, _ = batch(scheduler, 1)
    rewards = [s.reward.reward for s in groups[0].samples]
    assert rewards == [pytest.approx(1.0 + expected)] * 4
