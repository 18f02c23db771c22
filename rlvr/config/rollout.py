"""The `rollout` and `overlap` sections: prompts and groups per step, dynamic sampling, what overlaps with what."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator

from rlvr.config.base import Strict


class FilterConfig(Strict):
    """Dynamic sampling (DAPO): which finished groups are kept. All off by default except dropping groups with
    fewer than `min_valid` scored samples (nothing to compare inside them)."""

    zero_spread: bool = False  # drop groups whose rewards do not vary (all right / all wrong)
    zero_spread_threshold: float = Field(0.0, ge=0)  # "no spread": population std <= this
    metric: Literal["reward", "correct"] = "reward"  # measured on the (shaped) reward, or on correctness
    mean_band: tuple[float, float] | None = None  # keep groups whose mean lies in [low, high]
    min_valid: int = Field(1, ge=0)
    user_fn: str | None = None  # import path: fn(group) -> True/None keeps, False or a reason string drops


class RolloutConfig(Strict):
    prompts_per_step: int = Field(8, ge=1)
    group_size: int = Field(4, ge=1)
    domain_interleave_probs: dict[str, float] = {}  # empty: the single domain, or an error if there are several
    filter: FilterConfig = FilterConfig()
    # A dropped group is replaced at once by a new prompt; a replacement's replacement is one round deeper.
    # Past max_refill_rounds the step goes on with fewer groups (metric <domain>/scheduler/quota_shortfall).
    max_refill_rounds: int = Field(10, ge=0)
    # shortfall: launch exactly the missing groups; full_batch: launch a whole quota each round (verl's way).
    refill: Literal["shortfall", "full_batch"] = "shortfall"
    oversample_frac: float = Field(0.0, ge=0)  # tail oversampling: launch this fraction more, keep the first done
    carry_over: bool = True  # surplus finished groups serve the next step instead of being thrown away
    max_carry_staleness: int = Field(1, ge=0)  # a carried group older than this many steps is dropped
    mask_truncated: bool = False  # responses cut at max_new_tokens are kept out of the loss (DAPO overlong filter)

    @field_validator("domain_interleave_probs")
    @classmethod
    def _probs_valid(cls, probs: dict[str, float]) -> dict[str, float]:
        for name, p in probs.items():
            if not (isinstance(p, (int, float)) and math.isfinite(p) and p >= 0):
                raise ValueError(f"probability of domain '{name}' must be a finite number >= 0, got {p!r}")
        return probs  # the sum is checked with the domains (Config): an unknown domain is the better message


class OverlapConfig(Strict):
    """What overlaps with what while rewards are slow (docs/async_rewards.md). Each switch works alone or
    with the others; all off and streaming on is the plain synchronous loop."""

    # Train on each mini-batch (actor_train.mini_batch_size sequences = whole groups) as soon as its groups'
    # rewards are all in, in completion order; the LR schedule still steps once per global step.
    mini_batch_pipeline: bool = False
    # Generate step t+1 (and send its reward requests) before training on step t: the batch trained at step
    # t comes from the policy of step t-1 (staleness exactly 1), anchored on its behaviour logprobs.
    one_step_off_policy: bool = False
    # Each sample's reward request leaves as soon as it is generated; off: only after the whole step's
    # generation (the recipe's baseline).
    streaming_rewards: bool = True
