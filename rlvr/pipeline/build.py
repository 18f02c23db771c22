"""Start-up work of the pipeline: Ray, data per domain, and the clusters. Kept out of the driver loop."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import ray

from rlvr.config import Config, ConfigError
from rlvr.data.dataset import RowFormat, load_prompts, split_by_domain, tokenize_prompts
from rlvr.data.types import Prompt
from rlvr.workers.actor_infer import ActorInferWorker
from rlvr.workers.actor_train import ActorTrainWorker, ReferenceWorker
from rlvr.workers.cluster import Cluster
from rlvr.workers.rewards.reward_actor import RewardActor, resolve_reward_class

log = logging.getLogger(__name__)


def new_run_dir(cfg: Config) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")[:-3]
    run_dir = Path(cfg.run.output_dir) / f"{cfg.run.name}-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_dir


def start_ray(cfg: Config) -> bool:
    """Joins RAY_ADDRESS / ray.address when given, else starts an embedded cluster. Returns True if we started it."""
    if ray.is_initialized():
        return False
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS")
    env = {"TOKENIZERS_PARALLELISM": "false", "RAY_DEDUP_LOGS": "1"}
    ray.init(address=address, num_cpus=cfg.ray.num_cpus, include_dashboard=False, log_to_driver=True,
             runtime_env={"env_vars": env})
    return True


@dataclass
class DomainData:
    train: list[Prompt]
    val: list[Prompt]
    dropped: list[str]  # sources of prompts dropped for length


def load_domain_data(cfg: Config, tokenizer) -> dict[str, DomainData]:
    """Every row routed to a configured domain (else an error naming the row), tokenised with the chat template."""
    d = cfg.data
    fmt = RowFormat(prompt_key=d.prompt_key, messages_key=d.messages_key, answer_key=d.answer_key,
                    domain_key=d.domain_key, tag_key=d.tag_key, tag_to_domain=d.tag_to_domain, id_key=d.id_key,
                    system_prompt=d.system_prompt)
    known = set(cfg.domains)
    out = {name: DomainData([], [], []) for name in known}
    for split, files in (("train", d.train_files), ("val", d.val_files)):
        if not files:
            continue
        for domain, items in split_by_domain(load_prompts(files, fmt, known, split)).items():
            kept, dropped = tokenize_prompts(items, tokenizer, d.max_prompt_length)
            getattr(out[domain], split).extend(kept)
            out[domain].dropped.extend(dropped)
            if dropped:
                log.warning("%s/%s: %d prompts longer than data.max_prompt_length=%d dropped, e.g. %s",
                            domain, split, len(dropped), d.max_prompt_length, dropped[:3])
    for domain, p in cfg.rollout.domain_interleave_probs.items():
        if p > 0 and not out[domain].train:
            raise ConfigError(f"rollout.domain_interleave_probs.{domain}: probability {p} but no training rows "
                              f"route to domain '{domain}' in {d.train_files}")
    return out


@dataclass
class Clusters:
    actor_train: Cluster
    actor_infer: Cluster
    reference: Cluster | None
    rewards: dict[str, Cluster]


def build_clusters(cfg: Config, model_path: str) -> Clusters:
    for domain, dc in cfg.domains.items():
        resolve_reward_class(domain, dc.reward)  # fail on a bad import path before starting anything
    actor_train = Cluster("actor_train", ActorTrainWorker, cfg.actor_train.world_size, cfg, model_path)
    actor_infer = Cluster("actor_infer", ActorInferWorker, cfg.generation.world_size, cfg, model_path,
                          max_concurrency=1000)
    reference = Cluster("reference", ReferenceWorker, 1, cfg, model_path) if cfg.needs_reference else None
    rewards = {domain: Cluster(f"reward/{domain}", RewardActor, dc.reward.world_size, domain, dc.reward,
                               max_concurrency=1000)
               for domain, dc in cfg.domains.items()}
    return Clusters(actor_train, actor_infer, reference, rewards)
