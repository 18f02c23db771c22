"""Reward workers for tests about the pipeline's failure handling (not real rewards: named as such)."""

from __future__ import annotations

import asyncio
import random

from rlvr.data.reward_result import RewardResult
from rlvr.workers.rewards.base import RewardWorker
from rlvr.workers.rewards.llm_judge import LLMJudgeRewardWorker


class FailingEveryOtherRewardForTest(RewardWorker):
    """Raises for odd sample indices, hangs for index 2 (past the deadline), scores the rest by length parity."""

    async def score(self, sample) -> RewardResult:
        if sample.index % 2:
            raise RuntimeError("injected reward failure")
        if sample.index == 2:
            await asyncio.sleep(3600)
        return RewardResult(reward=float(len(sample.response_ids) % 2), correct=None)


class LatencyRewardForTest(RewardWorker):
    """A remote reward stand-in: each call waits a random latency in [0, max_latency_s), then scores by response
    length parity (so groups have spread)."""

    def __init__(self, *args, max_latency_s: float = 0.2, seed: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_latency_s = max_latency_s
        self.rng = random.Random(seed)

    async def score(self, sample) -> RewardResult:
        await asyncio.sleep(self.rng.random() * self.max_latency_s)
        return RewardResult(reward=float(len(sample.response_ids) % 2), correct=None)


class AnyVerdictJudgeForTest(LLMJudgeRewardWorker):
    """The real LLM-judge worker (its HTTP client, retries and errors), except that a reply its parser cannot
    read scores 0 instead of "invalid": a tiny random judge model never says YES or NO, and tests about the
    judge server's faults need kept groups, not verdicts."""

    async def score(self, sample) -> RewardResult:
        result = await super().score(sample)
        if result.status == "invalid":
            return RewardResult(reward=0.0, correct=False, info=f"unread verdict: {result.info}"[:300])
        return result
