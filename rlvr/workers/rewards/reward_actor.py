"""The reward cluster's Ray actor: hosts one RewardWorker subclass named by import path in the config."""

from __future__ import annotations

import os

from rlvr.config.base import ConfigError
from rlvr.config.call_args import check_call_args
from rlvr.config.domains import RewardConfig
from rlvr.config.load import import_class
from rlvr.data.reward_result import RewardResult
from rlvr.data.types import Sample
from rlvr.workers.rewards.base import RewardLimits, RewardWorker


def resolve_reward_class(domain: str, cfg: RewardConfig) -> type[RewardWorker]:
    """Import `cfg.worker`; errors name the config key, so a typo fails before any actor starts."""
    return import_class(f"domains.{domain}.reward.worker", cfg.worker, RewardWorker, "a RewardWorker subclass")


def check_reward_args(domain: str, cfg: RewardConfig) -> None:
    """The worker class imports and its constructor would take `args` (names and annotated types), checked without
    building it."""
    check_call_args(resolve_reward_class(domain, cfg), cfg.args, f"domains.{domain}.reward.args",
                    fixed=("domain", "limits"))


def build_reward_worker(domain: str, cfg: RewardConfig) -> RewardWorker:
    cls = resolve_reward_class(domain, cfg)
    limits = RewardLimits(max_concurrency=cfg.max_concurrency, timeout_s=cfg.timeout_s,
                          max_retries=cfg.max_retries, retry_backoff_s=cfg.retry_backoff_s,
                          val_max_concurrency=cfg.val_max_concurrency)
    try:
        return cls(domain=domain, limits=limits, **cfg.args)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{cfg.worker} rejected them: {err}", key=f"domains.{domain}.reward.args") from None


class RewardActor:
    def __init__(self, domain: str, cfg: RewardConfig, rank: int = 0):
        self.domain = domain
        self.worker = build_reward_worker(domain, cfg)

    async def score(self, sample: Sample, lane: str = "train") -> RewardResult:
        """Requests from any number of steps are served at once, up to the lane's concurrency."""
        return await self.worker.evaluate(sample, lane)

    async def metrics(self, reset: bool = True) -> dict[str, float]:
        out = self.worker.metrics()
        if reset:
            self.worker.reset_metrics()
        return out

    def __repr__(self) -> str:  # names the worker in its log file and console lines
        return f"RewardActor[{self.domain}]"

    async def health(self) -> dict[str, object]:
        """This process and what the worker runs besides it (pids of servers it owns), for supervision and for
        tests that inject faults."""
        return {"pid": os.getpid(), **self.worker.health()}

    async def set_base_url(self, url: str) -> None:
        """A restarted server answers at a new address (the local judge server): the worker's client follows."""
        self.worker.base_url = url

    async def set_sandbox_url(self, url: str) -> None:
        """The shared sandbox server (rlvr/pipeline/local_servers.py) was restarted on another port."""
        self.worker.server_moved(url)

    async def close(self) -> None:
        self.worker.close()
