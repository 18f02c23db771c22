"""The `domains` section: each domain is scored by a reward worker or played in an env."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from rlvr.config.base import Strict, _keyed
from rlvr.config.cluster import PlacementConfig


class RewardConfig(Strict):
    worker: str  # import path of a RewardWorker subclass, e.g. rlvr.workers.rewards.math_rule.MathRuleRewardWorker
    world_size: int = Field(1, ge=1)
    max_concurrency: int = Field(16, ge=1)
    timeout_s: float = Field(30.0, gt=0)
    max_retries: int = Field(2, ge=0)
    retry_backoff_s: float = Field(0.5, ge=0)
    # Validation scores through its own lane (own concurrency slots), so it never queues behind training
    # rewards and never steals their slots; None: the same limit as max_concurrency.
    val_max_concurrency: int | None = Field(None, ge=1)
    args: dict[str, Any] = {}  # passed to the worker's constructor
    placement: PlacementConfig | None = None  # None: placement.reward


class EnvConfig(Strict):
    """A multi-turn environment domain (rlvr/envs/base.py): the policy acts, the env answers, turn by turn."""

    path: str  # import path of an Env subclass, e.g. rlvr.envs.grid_puzzle.GridPuzzleEnv
    args: dict[str, Any] = {}  # passed to the env's constructor and to its make_tasks
    max_turns: int = Field(5, ge=1)  # turns per episode; an episode still running after them ends "max_turns"
    max_tokens_per_turn: int | None = Field(None, ge=1)  # policy tokens per turn; None: generation.max_new_tokens
    # The whole episode (first prompt + every turn + every observation) must fit in this many tokens; an episode
    # that would outgrow it ends with finish reason "token_budget". The vLLM context is sized to hold it.
    max_total_tokens: int = Field(1024, ge=16)
    step_timeout_s: float = Field(30.0, gt=0)  # deadline of one reset() / step() call
    train_tasks: int = Field(256, ge=1)  # tasks the env's make_tasks draws for training
    val_tasks: int = Field(16, ge=1)  # ... and for validation (disjoint seeds)
    max_env_threads: int = Field(16, ge=1)  # threads for envs whose reset/step are plain defs

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"path": data} if isinstance(data, str) else data  # `env: pkg.module.Class`


class DomainConfig(Strict):
    """A domain is scored by a reward worker (single-turn) or played in an env (multi-turn): exactly one."""

    reward: RewardConfig | None = None
    env: EnvConfig | None = None
    # Overrides of algorithm.reward_processing for this domain, key by key (RewardProcessingConfig's keys).
    reward_processing: dict[str, Any] = {}

    @model_validator(mode="after")
    def _exactly_one(self) -> "DomainConfig":
        if self.reward is not None and self.env is not None:
            raise _keyed("env", "a domain names a reward worker or an env, not both")
        if self.reward is None and self.env is None:
            raise _keyed("reward", "a domain needs a reward worker (reward.worker) or an env (env.path)")
        return self
