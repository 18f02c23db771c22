"""A new reward is a RewardWorker subclass with one `score` method; the base class adds the concurrency
limit, per-call deadline, retries and metrics. See README.md beside this file."""

from __future__ import annotations

import re

from rlvr.data.reward_result import RewardResult
from rlvr.workers.rewards.base import RewardLimits, RewardWorker


class KeywordLengthRewardWorker(RewardWorker):
    """reward = 1 if the ground truth appears in the response as a whole word or number, minus a length
    penalty that grows linearly past `max_chars` up to `length_penalty` at twice that length."""

    def __init__(self, domain: str, limits: RewardLimits | None = None, max_chars: int = 300,
                 length_penalty: float = 0.5) -> None:
        super().__init__(domain, limits)
        self.max_chars = max_chars
        self.length_penalty = length_penalty

    def score(self, sample) -> RewardResult:  # a plain def runs in a thread; use `async def` for I/O
        truth = sample.prompt.ground_truth
        answer = "" if truth is None else str(truth).strip()
        if not answer:  # not the response's fault: raise, and the base class reports status "error"
            raise ValueError(f"prompt {sample.prompt.uid} has no ground truth")
        text = sample.response_text
        found = re.search(rf"(?<![\w.]){re.escape(answer)}(?!\w|\.\d)", text) is not None
        over = min(1.0, (len(text) - self.max_chars) / self.max_chars)  # 0 at max_chars, 1 at twice that
        length = -self.length_penalty * over if over > 0 else 0.0
        return RewardResult(reward=float(found) + length, correct=found,
                            parts={"keyword": float(found), "length": length},
                            info=f"{'found' if found else 'missing'} {answer[:50]!r}, {len(text)} chars")
