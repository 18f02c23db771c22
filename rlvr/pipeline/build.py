"""Start-up work of the pipeline: Ray, data per domain, and the clusters. Kept out of the driver loop."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import ray

from rlvr.config import Config, ConfigError, RewardConfig
from rlvr.judge_server.launcher import JudgeServerHandle, start_judge_server
from rlvr.models.default_model import resolve_model_path
from rlvr.data.dataset import (BadRow, RowFormat, load_prompts, split_by_domain, summarize_bad_rows, tokenize_prompts,
                               with_lines)
from rlvr.data.types import Prompt
from rlvr.workers.actor_infer import ActorInferWorker
from rlvr.workers.actor_train import ActorTrainWorker, ReferenceWorker
from rlvr.workers.cluster import Cluster
from rlvr.workers.rewards.llm_judge import LLMJudgeRewardWorker
from rlvr.workers.rewards.reward_actor import RewardActor, resolve_reward_class
from rlvr.workers.supervision import Waiter

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
    # "local": an embedded cluster of our own; ray.init() without an address would join whatever Ray cluster
    # happens to run on the machine (another user's run).
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS") or "local"
    # Workers load models quietly: one "Loading weights" bar per actor per start drowns the run's own output.
    env = {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    ray.init(address=address, num_cpus=cfg.ray.num_cpus, include_dashboard=False, log_to_driver=True,
             runtime_env={"env_vars": env})
    return True


@dataclass
class DomainData:
    train: list[Prompt]
    val: list[Prompt]
    dropped: list[str]  # sources of prompts dropped for length


def load_domain_data(cfg: Config, tokenizer, report_dir: Path | None = None) -> dict[str, DomainData]:
    """Every row routed to a configured domain, tokenised with the chat template. Rows that cannot be used are
    counted and named (log, and `<report_dir>/bad_rows.jsonl`) and left out (`data.bad_rows: skip`), or stop the
    run (`error`); a domain left with no training rows is an error before anything starts."""
    d = cfg.data
    fmt = RowFormat(prompt_key=d.prompt_key, messages_key=d.messages_key, answer_key=d.answer_key,
                    domain_key=d.domain_key, tag_key=d.tag_key, tag_to_domain=d.tag_to_domain, id_key=d.id_key,
                    system_prompt=d.system_prompt)
    known = set(cfg.domains)
    out = {name: DomainData([], [], []) for name in known}
    bad: list[BadRow] = []
    for split, files in (("train", d.train_files), ("val", d.val_files)):
        if not files:
            continue
        split_bad: list[BadRow] | None = [] if d.bad_rows == "skip" else None
        for domain, items in split_by_domain(load_prompts(files, fmt, known, split, bad=split_bad)).items():
            kept, dropped = tokenize_prompts(items, tokenizer, d.max_prompt_length)
            getattr(out[domain], split).extend(kept)
            out[domain].dropped.extend(dropped)
            if dropped:
                log.warning("%s/%s: %d prompts longer than data.max_prompt_length=%d dropped, e.g. %s",
                            domain, split, len(dropped), d.max_prompt_length, dropped[:3])
            bad.extend(with_lines([BadRow(src, "too_long", f"{src}: longer than data.max_prompt_length="
                                          f"{d.max_prompt_length} tokens") for src in dropped]))
        bad.extend(split_bad or [])
    if bad:
        log.warning("data: %s", summarize_bad_rows(bad))
        if report_dir is not None:
            with open(Path(report_dir) / "bad_rows.jsonl", "w") as f:
                for b in bad:
                    f.write(json.dumps(b.to_json()) + "\n")
    for domain, p in cfg.rollout.domain_interleave_probs.items():
        if p > 0 and not out[domain].train:
            why = f"; {summarize_bad_rows(bad)}" if bad else ""
            raise ConfigError(f"rollout.domain_interleave_probs.{domain}: probability {p} but no usable training "
                              f"rows route to domain '{domain}' in {d.train_files}{why}")
    return out


@dataclass
class Clusters:
    actor_train: Cluster
    actor_infer: Cluster
    reference: Cluster | None
    rewards: dict[str, Cluster]


def start_local_judge(cfg: Config) -> tuple[JudgeServerHandle | None, dict[str, RewardConfig]]:
    """Starts the embedded judge server when an LLM-judge reward asks for it (`base_url: local` or none), and
    returns the reward configs with that server's URL filled in."""
    rewards = {d: dc.reward for d, dc in cfg.domains.items()}
    local = [d for d, r in rewards.items() if issubclass(resolve_reward_class(d, r), LLMJudgeRewardWorker)
             and r.args.get("base_url") in (None, "local")]
    if not local:
        return None, rewards
    js = cfg.judge_server
    server_args = ["--threads", str(js.threads)] if js.threads else []
    handle = start_judge_server(resolve_model_path(js.model, cfg.model.cache_dir), prefer_vllm=js.prefer_vllm,
                                startup_timeout_s=js.startup_timeout_s, server_args=server_args,
                                vllm_args=js.vllm_args)
    log.info("local judge server for %s at %s (%s)", local, handle.url, handle.backend)
    for d in local:
        rewards[d] = rewards[d].model_copy(update={"args": {**rewards[d].args, "base_url": handle.url}})
    return handle, rewards


def train_gpus_per_worker(cfg: Config) -> float:
    """actor_train.num_gpus_per_worker, or (None) 1 when the Ray cluster has GPUs; an error, not a hang, when the
    cluster has too few for actor_train (and the reference)."""
    t, have = cfg.actor_train, ray.cluster_resources().get("GPU", 0.0)
    gpus = t.num_gpus_per_worker if t.num_gpus_per_worker is not None else (1.0 if have >= 1 else 0.0)
    need = gpus * (t.world_size + (1 if cfg.needs_reference else 0))
    if need > have:
        raise ConfigError(f"actor_train.num_gpus_per_worker: {need:g} GPUs needed (world_size {t.world_size}"
                          f"{' + reference' if cfg.needs_reference else ''}), the Ray cluster has {have:g}")
    return gpus


def build_clusters(cfg: Config, model_path: str, rewards_cfg: dict[str, RewardConfig],
                   waiter: Waiter | None = None) -> Clusters:
    for domain, reward in rewards_cfg.items():
        resolve_reward_class(domain, reward)  # fail on a bad import path before starting anything
    gpus = train_gpus_per_worker(cfg)
    # Every rank of actor_train joins one process group (gloo on CPU, NCCL on CUDA); the reference is one process.
    # Trainer ranks hold optimizer state and form a process group: not restartable (a death stops the run).
    # Inference and reward workers are: Ray restarts them and their requests are sent again (docs/faults.md).
    restarts = cfg.faults.max_restarts
    actor_train = Cluster("actor_train", ActorTrainWorker, cfg.actor_train.world_size, cfg, model_path,
                          num_gpus=gpus, rendezvous=True, waiter=waiter)
    actor_infer = Cluster("actor_infer", ActorInferWorker, cfg.generation.world_size, cfg, model_path,
                          max_concurrency=1000, max_restarts=restarts, waiter=waiter)
    reference = (Cluster("reference", ReferenceWorker, 1, cfg, model_path, num_gpus=gpus, rendezvous=True,
                         waiter=waiter) if cfg.needs_reference else None)
    rewards = {domain: Cluster(f"reward/{domain}", RewardActor, reward.world_size, domain, reward,
                               max_concurrency=1000, max_restarts=restarts, waiter=waiter)
               for domain, reward in rewards_cfg.items()}
    return Clusters(actor_train, actor_infer, reference, rewards)
