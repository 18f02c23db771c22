"""Reward workers for tests about the pipeline's failure handling (not real rewards: named as such)."""

from __future__ import annotations

import asyncio

from rlvr.workers.rewards.base import RewardWorker
from rlvr.workers.rewards.result import RewardResult


class FailingEveryOtherRewardForTest(RewardWorker):
    """Raises for odd sample indices, hangs for index 2 (past the deadline), scores the rest by length parity."""

    async def score(self, sample) -> RewardResult:
        if sample.index % 2:
            raise RuntimeError("injected reward failure")
        if sample.index == 2:
            await asyncio.sleep(3600)
        return RewardResult(reward=float(len(sample.response_ids) % 2), correct=None)
