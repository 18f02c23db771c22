"""The inference router on fake engines (these tests are about request routing): least outstanding sequences,
shared by every domain's scheduler, aborts sent to the worker that holds the request."""

from __future__ import annotations

import asyncio

import pytest
from ray.exceptions import RayActorError

from rlvr.config.load import config_from_dict
from rlvr.data.types import SamplingParams
from rlvr.schedulers.dynamic_sampling import DynamicSamplingScheduler
from rlvr.workers.infer_router import COOLDOWN_S, InferRouter, least_outstanding
from tests.helpers.fakes import FakeInferWorkerForTest, LocalHandle, RewardHandleForTest, ScriptedRewardForTest, prompt


def test_least_outstanding_breaks_ties_by_index():
    assert least_outstanding([0, 0, 0]) == 0
    assert least_outstanding([4, 1, 1]) == 1
    assert least_outstanding([2, 3, 0]) == 2
    assert least_outstanding([0, 5, 1], avoid={0}) == 2
    assert least_outstanding([0, 5], avoid={0, 1}) == 0  # every worker down: the least loaded still


class DeadWorkerForTest:
    """An inference worker whose process died: every call fails as Ray fails calls to a dead actor."""

    def __init__(self):
        self.calls = 0

    async def generate(self, prompt_ids, n, sampling, request_id=None):
        self.calls += 1
        raise RayActorError()


def test_a_dead_worker_is_passed_over_while_it_restarts():
    dead, alive = DeadWorkerForTest(), FakeInferWorkerForTest()
    router = InferRouter([LocalHandle(dead), LocalHandle(alive)])

    async def run():
        sampling = SamplingParams(4)
        with pytest.raises(RayActorError):  # the scheduler's re-send counts it and sends again
            await router.generate([1, 1], 2, sampling, "r0")
        again = await router.generate([1, 1], 2, sampling, "r0")  # the re-send
        later = await router.generate([1, 1], 2, sampling, "r1")
        return again, later, asyncio.get_running_loop().time()

    again, later, now = asyncio.run(run())
    assert dead.calls == 1 and alive.requests == ["r0", "r1"]  # both went to the live worker
    assert all(g.finish_reason == "stop" for g in again + later)
    assert 0 < router.down_until[0] - now <= COOLDOWN_S and router.outstanding == [0, 0]


def test_requests_go_where_fewest_sequences_are_outstanding():
    fakes = [FakeInferWorkerForTest(), FakeInferWorkerForTest()]
    router = InferRouter([LocalHandle(f) for f in fakes])

    async def run():
        sampling = SamplingParams(4)
        long = asyncio.ensure_future(router.generate([300, 1], 8, sampling, "long"))  # 8 sequences on worker 0
        await asyncio.sleep(0.02)
        shorts = [asyncio.ensure_future(router.generate([1, 1], 2, sampling, f"s{i}")) for i in range(4)]
        await asyncio.sleep(0)
        # 2+2+2+2 go to worker 1 until it reaches worker 0's 8; none queue behind the long request
        assert router.outstanding == [8, 8]
        await asyncio.gather(*shorts)
        await router.abort(["long"])
        out = await long
        return out

    out = asyncio.run(run())
    assert fakes[0].requests == ["long"] and fakes[1].requests == ["s0", "s1", "s2", "s3"]
    assert all(g.finish_reason == "abort" for g in out)  # the abort reached worker 0, which held the request
    assert "long" in fakes[0].aborted and not fakes[1].aborted
    assert router.outstanding == [0, 0] and router.served == [8, 8] and router.where == {}


def test_two_domains_share_one_balance():
    """Per-scheduler round-robin would put 2 of each domain's 3 prompts on worker 0 (16 sequences against 8);
    through the shared router the 6 prompts split 3 / 3."""
    fakes = [FakeInferWorkerForTest(), FakeInferWorkerForTest()]
    router = LocalHandle(InferRouter([LocalHandle(f) for f in fakes]))
    schedulers = []
    for domain in ("a", "b"):
        cfg = config_from_dict({"data": {"train_files": ["unused.jsonl"]},
                                "domains": {domain: {"reward": {
                                    "worker": "tests.helpers.fakes.ScriptedRewardForTest"}}},
                                "rollout": {"group_size": 4}})
        reward = RewardHandleForTest(ScriptedRewardForTest(domain))
        data = [prompt(f"{domain}{i}", [1, 0, 1, 0], gen_delay_ms=50, domain=domain) for i in range(3)]
        schedulers.append(DynamicSamplingScheduler(domain, data, [], [router], [LocalHandle(reward)], cfg))

    async def run():
        return await asyncio.gather(*(s.get_batch(3, 0, 0) for s in schedulers))

    results = asyncio.run(run())
    assert [len(groups) for groups, _ in results] == [3, 3]
    assert len(fakes[0].requests) == 3 and len(fakes[1].requests) == 3
    assert router._obj.served == [12, 12]
