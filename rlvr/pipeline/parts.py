"""What the driver runs on, handed to it whole: `build_pipeline(cfg)` starts the real parts (run directory, data,
Ray, the judge and sandbox servers, every cluster, the schedulers, fault supervision); the simulator (rlvr/sim) and
tests build `PipelineParts` from fakes instead. RLVRPipeline itself starts nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.config.load import save_resolved
from rlvr.config.domains import RewardConfig
from rlvr.config.root import Config
from rlvr.pipeline.build import (Clusters, build_clusters, build_episode_runners, new_run_dir, start_local_judge,
                                 start_ray, write_bad_rows)
from rlvr.pipeline.domain_schedulers import DomainSchedulers
from rlvr.pipeline.faults import FaultLog, Supervisor
from rlvr.pipeline.local_servers import start_local_sandbox
from rlvr.pipeline.preflight import Checked, preflight
from rlvr.runtime.ray_runtime import RAY
from rlvr.runtime.waiter import Waiter
from rlvr.telemetry import console
from rlvr.workers.placement import write_placement


@dataclass
class PipelineParts:
    run_dir: Path | None
    tokenizer: Any  # its pad id builds the batches; the weight-sync probe is tokenised with it
    waiter: Waiter  # every wait of the driver (deadlines; the supervisor's tick while waiting)
    faults: FaultLog
    clusters: Clusters
    schedulers: DomainSchedulers
    runtime: Any = RAY  # how the loop waits and reads the clock: Ray and the wall clock, or virtual time
    resume_from: Path | None = None  # a checkpoint to continue from
    trackers: Any = None  # None: the real ones (JSONL, TensorBoard, W&B), made once the resume point is read
    system: Any = None  # None: the real SystemMonitor over the clusters' processes
    # What the pipeline started and so ends in close() (none in the simulator)
    judge_server: Any = None
    sandbox_server: Any = None
    owns_ray: bool = False
    # False: the clusters serve several runs one after another (tests/helpers/shared_clusters.py) and stay up
    # when this run closes; whoever built them ends them
    owns_clusters: bool = True


def start_local_servers(cfg: Config, run_dir: Path) -> tuple[Any, Any, dict[str, RewardConfig]]:
    """The judge and sandbox servers the rewards ask for (none when they name their own), and the reward configs
    with their URLs filled in. A server started before a later one fails is stopped."""
    judge_server, rewards_cfg = start_local_judge(cfg, log_dir=run_dir / "logs" / "judge_server")
    try:
        sandbox_server, rewards_cfg = start_local_sandbox(cfg, rewards_cfg)
    except BaseException:
        if judge_server is not None:
            judge_server.stop()
        raise
    return judge_server, sandbox_server, rewards_cfg


def in_background(fn: Callable[..., Any], *args: Any) -> Future:
    """`fn(*args)` in a daemon thread: the interpreter's exit does not wait for it, so a Ctrl-C during start-up
    ends the run at once (the guardian and the servers' exit hooks end what it started meanwhile)."""
    future: Future = Future()

    def run() -> None:
        future.set_running_or_notify_cancel()
        try:
            future.set_result(fn(*args))
        except BaseException as err:
            future.set_exception(err)

    threading.Thread(target=run, name=getattr(fn, "__name__", "background"), daemon=True).start()
    return future


def stop_servers(servers: Future) -> None:
    """After the workers failed to start (an error, not Ctrl-C): the servers, once their start is over (a start
    that failed stopped what it had started)."""
    try:
        judge_server, sandbox_server, _ = servers.result()
    except BaseException:
        return
    for server in (judge_server, sandbox_server):
        if server is not None:
            server.stop()


def start_servers_and_clusters(cfg: Config, run_dir: Path, model_path: str, waiter: Waiter
                               ) -> tuple[Any, Any, dict[str, RewardConfig], Clusters]:
    """The local servers and every cluster, at the same time: the servers start in a thread while the workers
    load their models and engines (in the main job the judge server took 30 s, the workers 44 s, one after the
    other before); the reward workers, which need the servers' URLs, start once those answer. A failure on
    either side stops what the other started."""
    servers = in_background(start_local_servers, cfg, run_dir)
    try:
        clusters = build_clusters(cfg, model_path, lambda: servers.result()[2], waiter)
    except Exception:
        stop_servers(servers)
        raise
    judge_server, sandbox_server, rewards_cfg = servers.result()
    return judge_server, sandbox_server, rewards_cfg, clusters


def supervise_and_schedule(cfg: Config, data: dict, episodes: dict, run_dir: Path, waiter: Waiter,
                           clusters: Clusters, judge_server: Any = None,
                           rewards_cfg: dict[str, RewardConfig] | None = None,
                           sandbox_server: Any = None) -> tuple[FaultLog, DomainSchedulers]:
    """What a run has of its own over its started clusters: the fault log and the supervisor that watches the
    workers and servers (it waits until every one is up), the domain schedulers over its data, the placement
    record."""
    faults = FaultLog(run_dir / "faults.jsonl")
    supervisor = Supervisor(cfg.faults, waiter, faults)  # the waiter's supervisor from now on
    supervisor.watch(clusters, judge_server, rewards_cfg, sandbox_server,
                     weight_source=clusters.weight_sync.weight_source)
    clusters.weight_sync.supervise(supervisor, faults)
    schedulers = DomainSchedulers(cfg, data, clusters.infer_endpoints,
                                  {d: c.workers for d, c in clusters.rewards.items()},
                                  waiter, faults, episodes, placement=clusters.planner)
    write_placement(run_dir, clusters, schedulers.actors)
    return faults, schedulers


def build_pipeline(cfg: Config, checked: Checked | None = None) -> PipelineParts:
    """The parts of a real run, started in order: the checks that need nothing started (resume target, models,
    reward and env arguments, the data: rlvr/pipeline/preflight.py), the run directory (or the one to resume),
    Ray, the servers, the clusters, the schedulers. `checked`: the checks' result when the caller ran them."""
    checked = checked or preflight(cfg)
    resume_from, tokenizer, data, model_path = checked.resume_from, checked.tokenizer, checked.data, checked.model_path
    run_dir = resume_from.parent.parent if resume_from else new_run_dir(cfg)
    save_resolved(cfg, run_dir)
    console.start_run(cfg, run_dir)  # the header; logs to <run>/logs/ (when the CLI installed the console)
    if checked.bad_rows:
        write_bad_rows(run_dir, checked.bad_rows)
    console.stage_done("checks (config, models, data)", checked.seconds)
    episodes = build_episode_runners(cfg, tokenizer)  # env domains: played, not scored
    with console.stage("Ray"):
        owns_ray = start_ray(cfg)
    waiter = Waiter.from_config(cfg.faults, RAY)
    with console.stage("servers (judge, sandbox, where asked for) and workers (actor_train, reference, critic "
                       "loaded; actor_infer, rewards started)"):
        judge_server, sandbox_server, rewards_cfg, clusters = start_servers_and_clusters(cfg, run_dir, model_path,
                                                                                         waiter)
    faults, schedulers = supervise_and_schedule(cfg, data, episodes, run_dir, waiter, clusters,
                                                judge_server, rewards_cfg, sandbox_server)
    # The engines load in actor_infer's constructors, alongside everything above; waited for here (as the first
    # weight sync would: a worker that dies loading is waited for once restarted) so that the console's seconds
    # are the load's and step 0's model_update does not carry it.
    with console.stage("engines (actor_infer)"):
        clusters.actor_infer.health(cfg.faults.resend_patience_s)
    return PipelineParts(run_dir, tokenizer, waiter, faults, clusters, schedulers, resume_from=resume_from,
                         judge_server=judge_server, sandbox_server=sandbox_server, owns_ray=owns_ray)
