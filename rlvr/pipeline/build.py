"""Start-up work of the pipeline: Ray, data per domain, and the clusters. Kept out of the driver loop."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import ray

from rlvr.config.base import ConfigError
from rlvr.config.domains import RewardConfig
from rlvr.config.root import Config
from rlvr.data.dataset import (BadRow, DataError, RowError, RowFormat, load_prompts, split_by_domain,
                               summarize_bad_rows, tokenize_prompts, with_lines)
from rlvr.data.types import Prompt
from rlvr.envs.base import check_args, resolve_env_class
from rlvr.judge_server.launcher import JudgeServerHandle, start_judge_server
from rlvr.lifecycle.guardian import child_pids, guard_process
from rlvr.models.default_model import resolve_model_path
from rlvr.pipeline.local_servers import reachable_url
from rlvr.pipeline.weight_sync import WeightSync
from rlvr.rollout.episode import EpisodeRunner, env_prompts
from rlvr.runtime.waiter import Waiter
from rlvr.telemetry import console
from rlvr.workers.actor_infer import ActorInferWorker
from rlvr.workers.actor_train import ActorTrainWorker, ReferenceWorker
from rlvr.workers.clusters import ActorInferCluster, ActorTrainCluster, CriticCluster, ReferenceCluster, RewardCluster
from rlvr.workers.critic import CriticWorker
from rlvr.workers.infer_router import InferRouter
from rlvr.workers.placement import Planner
from rlvr.workers.rewards.llm_judge import LLMJudgeRewardWorker
from rlvr.workers.rewards.reward_actor import RewardActor, resolve_reward_class

log = logging.getLogger(__name__)


def new_run_dir(cfg: Config) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")[:-3]
    run_dir = Path(cfg.run.output_dir) / f"{cfg.run.name}-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_dir


def worker_pythonpath(environ: dict[str, str] | None = None) -> str:
    """PYTHONPATH for Ray's workers: the directory this rlvr package was imported from first, then the driver's own
    PYTHONPATH. Ray adds the driver's directory to a worker's path only after the worker's set-up hook (the CLI's
    console, rlvr.telemetry.console) has imported rlvr the way the virtual environment says, and an editable
    install points at one checkout: a driver started from a second checkout or a git worktree on the same
    environment ran its own code and every worker the other checkout's (tests/integration/
    test_workers_run_the_drivers_rlvr.py)."""
    import rlvr

    environ = os.environ if environ is None else environ
    here = str(Path(rlvr.__file__).resolve().parents[1])
    rest = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != here]
    return os.pathsep.join([here, *rest])


def start_ray(cfg: Config) -> bool:
    """Joins RAY_ADDRESS / ray.address when given, else starts an embedded cluster. Returns True if we started it."""
    if ray.is_initialized():
        return False
    # "local": a new embedded cluster. Without it ray.init() joins the latest cluster started on this machine
    # (/tmp/ray/ray_current_cluster), e.g. another program's, and then rejects num_cpus.
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS") or "local"
    # Workers load models quietly: one "Loading weights" bar per actor per start drowns the run's own output.
    env = {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
           "PYTHONPATH": worker_pythonpath()}  # the workers run the driver's rlvr
    runtime_env: dict = {"env_vars": env}
    run_console = console.active()
    if run_console is not None:  # the CLI's console: worker records in a format it can sort (rlvr/telemetry/console.py)
        runtime_env["worker_process_setup_hook"] = "rlvr.telemetry.console.setup_worker_logging"
    before = set(child_pids())
    ray.init(address=address, num_cpus=cfg.ray.num_cpus, include_dashboard=False, log_to_driver=True,
             runtime_env=runtime_env)
    # An embedded cluster's processes (and so every actor and what the actors started) end with the driver at
    # once, also when it is SIGKILLed: Ray's own agents would outlive it by minutes.
    for pid in set(child_pids()) - before:
        guard_process(pid)
    if run_console is not None:
        run_console.route_ray_output()  # worker output to <run>/logs/workers/, errors to the console
    return True


@dataclass
class DomainData:
    train: list[Prompt]
    val: list[Prompt]
    dropped: list[str]  # sources of prompts dropped for length


def load_domain_data(cfg: Config, tokenizer, report_dir: Path | None = None,
                     bad_out: list[BadRow] | None = None) -> dict[str, DomainData]:
    """Every row routed to a configured reward domain, tokenised with the chat template; an env domain's tasks come
    from its env's make_tasks (their first prompt from its first observation). Rows that cannot be used are
    counted and named (log, `<report_dir>/bad_rows.jsonl` and `bad_out`) and left out (`data.bad_rows: skip`), or
    stop the run (`error`); a domain left with no training rows is an error before anything starts. A file that
    cannot be read or a row that stops the run is a ConfigError keyed by the file list it came from."""
    d = cfg.data
    fmt = RowFormat(prompt_key=d.prompt_key, messages_key=d.messages_key, answer_key=d.answer_key,
                    domain_key=d.domain_key, tag_key=d.tag_key, tag_to_domain=d.tag_to_domain, id_key=d.id_key,
                    system_prompt=d.system_prompt)
    known = {name for name, dc in cfg.domains.items() if dc.reward is not None}
    out = {name: DomainData([], [], []) for name in cfg.domains}
    for name, dc in cfg.domains.items():
        if dc.env is not None:
            out[name] = DomainData(env_prompts(name, dc.env, "train", cfg.run.seed),
                                   env_prompts(name, dc.env, "val", cfg.run.seed), [])
    bad: list[BadRow] = []
    for split, files in (("train", d.train_files), ("val", d.val_files)):
        if not files:
            continue
        split_bad: list[BadRow] | None = [] if d.bad_rows == "skip" else None
        try:
            prompts = load_prompts(files, fmt, known, split, bad=split_bad)
        except RowError as err:
            raise ConfigError(f"{err} (data.bad_rows: error stops at the first bad row; skip counts them and goes "
                              "on)", key=f"data.{split}_files") from None
        except DataError as err:
            raise ConfigError(str(err), key=f"data.{split}_files") from None
        for domain, items in split_by_domain(prompts).items():
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
            write_bad_rows(Path(report_dir), bad)
        if bad_out is not None:
            bad_out.extend(bad)
    for domain, p in cfg.rollout.domain_interleave_probs.items():
        if p > 0 and not out[domain].train:
            why = f"; {summarize_bad_rows(bad)}" if bad else ""
            raise ConfigError(f"no usable training rows route to domain '{domain}' (its probability in "
                              f"rollout.domain_interleave_probs is {p}) in {d.train_files}{why}",
                              key="data.train_files")
    return out


@dataclass
class Clusters:
    actor_train: ActorTrainCluster
    actor_infer: ActorInferCluster
    reference: ReferenceCluster | None
    critic: CriticCluster | None
    rewards: dict[str, RewardCluster]
    planner: Planner | None = None
    router: Any = None  # InferRouter actor when there are several inference workers
    weight_sync: WeightSync | None = None

    @property
    def infer_endpoints(self) -> list:
        """What the schedulers send requests to: the router, or the one inference worker."""
        return [self.router] if self.router is not None else list(self.actor_infer.workers)

    def release(self) -> None:
        """After the clusters are killed: the router and every placement group of the run."""
        if self.router is not None:
            ray.kill(self.router, no_restart=True)
        if self.planner is not None:
            self.planner.release()


def write_bad_rows(report_dir: Path, bad: list[BadRow]) -> None:
    with open(report_dir / "bad_rows.jsonl", "w") as f:
        for b in bad:
            f.write(json.dumps(b.to_json()) + "\n")


def local_judge_domains(cfg: Config) -> list[str]:
    """The domains whose LLM-judge reward asks for the embedded judge server (`base_url: local` or none)."""
    return [d for d, dc in cfg.domains.items() if dc.reward is not None
            and issubclass(resolve_reward_class(d, dc.reward), LLMJudgeRewardWorker)
            and dc.reward.args.get("base_url") in (None, "local")]


def start_local_judge(cfg: Config, log_dir: Path | None = None
                      ) -> tuple[JudgeServerHandle | None, dict[str, RewardConfig]]:
    """Starts the embedded judge server when an LLM-judge reward asks for it (`base_url: local` or none), and
    returns the reward configs with that server's URL filled in. Its output goes to `log_dir` (kept), or to a
    temporary directory removed when it stops."""
    rewards = {d: dc.reward for d, dc in cfg.domains.items() if dc.reward is not None}
    local = local_judge_domains(cfg)
    if not local:
        return None, rewards
    js = cfg.judge_server
    vllm_args, server_args = js.backend_args()
    handle = start_judge_server(resolve_model_path(js.model, cfg.model.cache_dir), prefer_vllm=js.prefer_vllm,
                                startup_timeout_s=js.startup_timeout_s, server_args=server_args,
                                vllm_args=vllm_args, log_dir=log_dir, host=js.host)
    handle.url = reachable_url(handle.url, js.host)  # reward workers on other nodes call it here
    log.info("local judge server for %s at %s (%s)", local, handle.url, handle.backend)
    if console.active() is not None:  # its errors on the console as they happen (its output is in log_dir)
        console.active().follow(handle.log_dir / "stderr.log", f"judge_server pid={handle.process.pid}")
    for d in local:
        rewards[d] = rewards[d].model_copy(update={"args": {**rewards[d].args, "base_url": handle.url}})
    return handle, rewards


def critic_model_path(cfg: Config, actor_model_path: str) -> str:
    """critic.model_path, or the actor's initial weights."""
    return resolve_model_path(cfg.critic.model_path, cfg.model.cache_dir) if cfg.critic.model_path else actor_model_path


def build_clusters(cfg: Config, model_path: str, rewards_cfg: Callable[[], dict[str, RewardConfig]],
                   waiter: Waiter | None = None) -> Clusters:
    """Every cluster of the run. The workers of actor_train, actor_infer, the reference and the critic are all
    made before any is waited for, so that their models and engines load at the same time; `rewards_cfg()` (the
    reward configs with the local servers' URLs, which may still be starting) is called once those workers load."""
    for domain, dc in cfg.domains.items():
        if dc.reward is not None:
            resolve_reward_class(domain, dc.reward)  # fail on a bad import path before starting anything
    planner = Planner(cfg)  # actor_train first: clusters colocated with it join its placement group
    # Trainer ranks hold optimizer state and form a process group: not restartable (a death stops the run).
    # Inference and reward workers are: Ray restarts them and their requests are sent again (docs/faults.md).
    restarts = cfg.faults.max_restarts
    try:
        # Every rank of actor_train joins one process group (gloo on CPU, NCCL on CUDA); the reference is one process.
        actor_train = ActorTrainCluster.start("actor_train", ActorTrainWorker, cfg.actor_train.world_size, cfg,
                                              model_path, rendezvous=True, defer_join=True, waiter=waiter,
                                              placement=planner.actor_train())
        actor_infer = ActorInferCluster.start("actor_infer", ActorInferWorker, cfg.generation.world_size, cfg,
                                              model_path, max_concurrency=1000, max_restarts=restarts, waiter=waiter,
                                              placement=planner.actor_infer())
        reference = (ReferenceCluster.start("reference", ReferenceWorker, 1, cfg, model_path, rendezvous=True,
                                            defer_join=True, waiter=waiter, placement=planner.reference())
                     if cfg.reference_worker else None)
        critic = None
        if cfg.algorithm.needs_critic:  # a trainer, like actor_train: not restartable
            critic = CriticCluster.start("critic", CriticWorker, cfg.critic.world_size, cfg,
                                         critic_model_path(cfg, model_path), rendezvous=True, defer_join=True,
                                         waiter=waiter, placement=planner.critic())
        elif cfg.critic.model_fields_set:
            log.warning("critic.* is set but algorithm.adv_estimator=%s uses no critic: no critic is started",
                        cfg.algorithm.adv_estimator)
        rewards = start_reward_clusters(cfg, rewards_cfg(), planner, waiter)
        for trainer in (actor_train, reference, critic):
            if trainer is not None:
                trainer.join()
        clusters = Clusters(actor_train, actor_infer, reference, critic, rewards, planner)
        clusters.weight_sync = WeightSync(cfg, actor_train, actor_infer, waiter or Waiter())
        if len(actor_infer) > 1:
            clusters.router = start_router(cfg, planner, actor_infer)
    except BaseException:
        planner.release()  # the actors in them go too
        raise
    return clusters


def start_reward_clusters(cfg: Config, rewards_cfg: dict[str, RewardConfig], planner: Planner,
                          waiter: Waiter | None) -> dict[str, RewardCluster]:
    """A reward cluster per domain that has a reward worker: restartable (their requests are sent again)."""
    return {domain: RewardCluster.start(f"reward/{domain}", RewardActor, reward.world_size, domain, reward,
                                        max_concurrency=1000, max_restarts=cfg.faults.max_restarts, waiter=waiter,
                                        placement=planner.reward(domain))
            for domain, reward in rewards_cfg.items()}


def start_router(cfg: Config, planner: Planner, actor_infer: ActorInferCluster):
    """The inference router the schedulers share (several inference workers), where the schedulers go: their
    resources, or (placement group) scheduler 0's bundle, asking for nothing. Restartable: it holds no state but
    counters, and its constructor gets the workers' handles again."""
    where = planner.scheduler().for_rank(0)
    if "scheduling_strategy" in where:
        where = {"num_cpus": 0, "scheduling_strategy": where["scheduling_strategy"]}
    return ray.remote(InferRouter).options(max_concurrency=1000, max_restarts=cfg.faults.max_restarts,
                                           **where).remote(actor_infer.workers)


def build_episode_runners(cfg: Config, tokenizer) -> dict[str, EpisodeRunner]:
    """One EpisodeRunner per env domain; the env class and its arguments are checked here, before any actor."""
    runners = {}
    for domain, dc in cfg.domains.items():
        if dc.env is not None:
            check_args(domain, resolve_env_class(domain, dc.env), dc.env)
            runners[domain] = EpisodeRunner(domain, dc.env, tokenizer, cfg.generation.max_new_tokens)
    return runners
