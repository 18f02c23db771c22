"""Hand-built groups of scored samples (no engine, no reward worker) for the batching / advantage tests."""

from __future__ import annotations

from rlvr.data.reward_result import RewardResult
from rlvr.data.types import Group, Prompt, Sample


def group(domain: str, gid: str, rewards: list[float | None], response_len: int = 2) -> Group:
    """Sample i answers with response_len + i tokens and the text "<gid>-<i>"; a None reward failed."""
    prompt = Prompt(uid=gid, domain=domain, ground_truth="1", prompt_ids=[1, 2])
    samples = [Sample(prompt=prompt, group_id=gid, index=i, response_ids=[3 + i] * (response_len + i),
                      response_text=f"{gid}-{i}", finish_reason="stop", policy_version=0,
                      reward=RewardResult(r, r > 0) if r is not None else RewardResult.failed("error", "x"))
               for i, r in enumerate(rewards)]
    return Group(gid, prompt, samples)
