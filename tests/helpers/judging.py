"""Scoring a few answers to "What is the capital of France?" with the real LLMJudgeRewardWorker against a judge
server's URL: shared by the tests of the judge server's transformers and vLLM backends."""

from __future__ import annotations

import asyncio

from rlvr.data.types import Prompt, Sample
from rlvr.workers.rewards.base import RewardLimits
from rlvr.workers.rewards.llm_judge import LLMJudgeRewardWorker


def judge_capital_answers(url: str, answers: list[str], timeout_s: float):
    """(results, worker) for `answers` judged against the reference "Paris"; the worker's client is closed."""
    worker = LLMJudgeRewardWorker("qa", RewardLimits(timeout_s=timeout_s, max_retries=0), base_url=url,
                                  max_tokens=8)
    samples = [
        Sample(prompt=Prompt(uid=f"p{i}", domain="qa", ground_truth="Paris",
                             messages=[{"role": "user", "content": "What is the capital of France?"}]),
               group_id="g", index=i, response_ids=[], response_text=text, finish_reason="stop", policy_version=0)
        for i, text in enumerate(answers)
    ]

    async def go():
        results = await asyncio.gather(*(worker.evaluate(s) for s in samples))
        await worker.aclose()
        return results

    return asyncio.run(go()), worker
