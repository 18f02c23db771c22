"""The records that travel through the pipeline: a prompt row, a generated sample, a finished group.

They are plain dataclasses so that Ray can pickle them between actors and tests can build them by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr.workers.rewards.result import RewardResult


@dataclass
class Prompt:
    """One data row after loading and routing.

    `messages` (chat form) or `text` (raw prompt) holds what the model sees; `prompt_ids` is filled once the
    chat template has been applied. `source` names the file and row index, for error messages.
    """

    uid: str
    domain: str
    ground_truth: Any
    messages: list[dict[str, str]] | None = None
    text: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    prompt_ids: list[int] = field(default_factory=list)
    source: str = ""


@dataclass
class Generation:
    """What an engine returns for one sampled response."""

    token_ids: list[int]
    text: str
    finish_reason: str  # "stop" (EOS or stop string) | "length" (hit max_new_tokens) | "abort"
    logprobs: list[float] | None = None  # behaviour-policy logprob of each token, when requested
    policy_version: int | None = None  # the weights version that generated it, when the engine knows


@dataclass
class Sample:
    """One response to a prompt, with its reward once scored."""

    prompt: Prompt
    group_id: str
    index: int  # position inside the group
    response_ids: list[int]
    response_text: str
    finish_reason: str
    policy_version: int
    logprobs: list[float] | None = None
    reward: RewardResult | None = None

    @property
    def scored_ok(self) -> bool:
        return self.reward is not None and self.reward.status == "ok"


@dataclass
class Group:
    """All `group_size` responses to one prompt; released by the scheduler only when every reward is in."""

    group_id: str
    prompt: Prompt
    samples: list[Sample]

    @property
    def domain(self) -> str:
        return self.prompt.domain
