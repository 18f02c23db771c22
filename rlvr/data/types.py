"""The records that travel through the pipeline: a prompt row, a generated sample, a finished group.

They are plain dataclasses so that Ray can pickle them between actors and tests can build them by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr.data.reward_result import RewardResult


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


@dataclass(frozen=True)
class SamplingParams:
    """How an engine samples one request (the same for vLLM and HF generate)."""

    max_new_tokens: int = 128
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0
    return_logprobs: bool = False


@dataclass
class Generation:
    """What an engine returns for one sampled response."""

    token_ids: list[int]
    text: str
    finish_reason: str  # "stop" (EOS or stop string) | "length" (hit max_new_tokens) | "abort"
    logprobs: list[float] | None = None  # behaviour-policy logprob of each token, when requested
    policy_version: int | None = None  # the weights version that generated it, when the engine knows


@dataclass
class Episode:
    """What a multi-turn episode (rlvr/rollout/episode.py) adds to its Sample: one entry per agent turn."""

    state_keys: list[str] = field(default_factory=list)  # anchor key of the state each action was taken in
    rewards: list[float] = field(default_factory=list)  # env reward after each action
    invalid_actions: int = 0  # turns whose action the env could not parse (info["invalid_action"])
    success: bool = False
    finish: str = ""  # done | max_turns | token_budget | env_error | env_timeout | env_invalid
    env_time_s: float = 0.0  # wall time inside reset/step

    @property
    def turns(self) -> int:
        return len(self.rewards)


@dataclass
class Sample:
    """One response to a prompt, with its reward once scored.

    A multi-turn sample's `response_ids` interleave the policy's tokens with the environment's observation tokens;
    `turn_index` (one entry per response token) holds the agent turn of each policy token and -1 on observation
    tokens, which never enter the loss. `logprobs` are 0.0 on observation tokens.
    """

    prompt: Prompt
    group_id: str
    index: int  # position inside the group
    response_ids: list[int]
    response_text: str
    finish_reason: str
    policy_version: int
    logprobs: list[float] | None = None
    reward: RewardResult | None = None
    turn_index: list[int] | None = None
    episode: Episode | None = None

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
