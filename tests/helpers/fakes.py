"""Fakes for scheduler tests (these tests are about scheduling, not generation): named as such.

- `LocalHandle` stands in for a Ray actor handle: `handle.method.remote(...)` runs the method on the current loop.
- `FakeInferWorkerForTest` answers `generate` after a delay taken from the prompt, with the real `Admission`
  control of ActorInferWorker, and records the number of requests inside the engine after every change.
- `ScriptedRewardForTest` (a real RewardWorker subclass) scores sample i of a prompt by `meta["correct"][i]`.
- `FakeForwardWorkerForTest` (with `BarrierForTest`) answers the driver's forward passes only once all of them
  have been called (the driver's forwards test is about their concurrency, not their numbers).
"""

from __future__ import annotations

import asyncio
import inspect

import torch

from rlvr.data.reward_result import RewardResult
from rlvr.data.types import Generation, Prompt
from rlvr.workers.actor_infer import Admission
from rlvr.workers.rewards.base import RewardWorker


class LocalHandle:
    def __init__(self, obj):
        self._obj = obj

    def __getattr__(self, name):
        method = getattr(self._obj, name)

        class _Method:
            @staticmethod
            def remote(*args, **kwargs):
                result = method(*args, **kwargs)
                if inspect.isawaitable(result):
                    return asyncio.ensure_future(result)
                future = asyncio.get_running_loop().create_future()
                future.set_result(result)
                return future

        return _Method


class FakeInferWorkerForTest:
    def __init__(self, cap: int = 64, response_len: int = 4):
        self.admission = Admission(cap)
        self.trace: list[int] = []
        self.aborted: set[str] = set()
        self.requests: list[str] = []
        self.response_len = response_len
        self._events: dict[str, asyncio.Event] = {}

    async def generate(self, prompt_ids, n, sampling, request_id=None):
        if not await self.admission.acquire(request_id):
            return [Generation([], "", "abort") for _ in range(n)]
        self.trace.append(self.admission.in_flight)
        self.requests.append(request_id)
        try:
            delay = prompt_ids[0] / 1000  # the first prompt "token" encodes the generation delay in ms
            event = self._events[request_id] = asyncio.Event()
            try:
                await asyncio.wait_for(event.wait(), timeout=delay)
            except asyncio.TimeoutError:
                pass
            if request_id in self.aborted:
                return [Generation([], "", "abort") for _ in range(n)]
            return [Generation([7] * self.response_len, "x", "stop") for _ in range(n)]
        finally:
            self.admission.release()
            self.trace.append(self.admission.in_flight)

    async def abort(self, request_ids):
        self.admission.abort(request_ids)
        self.aborted.update(request_ids)
        for i in request_ids:
            if i in self._events:
                self._events[i].set()


class ScriptedRewardForTest(RewardWorker):
    async def score(self, sample) -> RewardResult:
        await asyncio.sleep(sample.prompt.meta.get("reward_delay_s", 0.0))
        ok = bool(sample.prompt.meta["correct"][sample.index])
        return RewardResult(reward=float(ok), correct=ok)


class RewardHandleForTest:
    """What the scheduler expects of a reward actor, around a real RewardWorker."""

    def __init__(self, worker: RewardWorker):
        self.worker = worker

    async def score(self, sample, lane="train"):
        return await self.worker.evaluate(sample, lane)

    async def metrics(self):
        return self.worker.metrics()


def prompt(uid: str, correct: list[int], gen_delay_ms: int = 1, reward_delay_s: float = 0.0,
           domain: str = "d") -> Prompt:
    return Prompt(uid=uid, domain=domain, ground_truth="0", messages=[{"role": "user", "content": uid}],
                  meta={"correct": correct, "reward_delay_s": reward_delay_s}, prompt_ids=[gen_delay_ms, 1, 2])


class BarrierForTest:
    def __init__(self, parties: int):
        self.parties, self.arrived, self.all_in = parties, 0, asyncio.Event()

    async def arrive(self) -> int:
        self.arrived += 1
        if self.arrived >= self.parties:
            self.all_in.set()
        await asyncio.wait_for(self.all_in.wait(), timeout=60)
        return self.arrived


class FakeForwardWorkerForTest:
    """Answers compute_logprobs / compute_values with a constant, once every forward has arrived at the barrier."""

    def __init__(self, barrier, value: float, rank: int = 0):
        self.barrier, self.value = barrier, value

    async def _answer(self, batch) -> torch.Tensor:
        await self.barrier.arrive.remote()
        return torch.full(batch["loss_mask"].shape, self.value) * batch["loss_mask"]

    async def compute_logprobs(self, batch) -> torch.Tensor:
        return await self._answer(batch)

    async def compute_values(self, batch) -> torch.Tensor:
        return await self._answer(batch)
