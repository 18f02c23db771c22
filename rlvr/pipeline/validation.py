"""Validation's results as the driver records them, and validation on its own (`python -m rlvr.eval`).

`validation_results` turns the schedulers' per-domain answers into the metrics (val_correct per domain and over
all scored samples) and the rows of val_samples.jsonl; the training loop (RLVRPipeline.val) and `Evaluator`
both use it, over the same schedulers' `validate`, so a model is scored the same way in and out of a run.

`Evaluator` starts what validation needs and nothing more: Ray, the judge and sandbox servers where a domain
asks for them, and the reward clusters, once for every model; then per model the domain schedulers over its
tokenized data, and an actor_infer cluster loading it, or, where the model differs from the one before only in its
weights, the running cluster with the new weights loaded into it (rlvr/pipeline/eval_weights.py). No trainer,
reference or critic is started.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import ray

from rlvr.config.load import save_resolved
from rlvr.config.root import Config
from rlvr.lifecycle.teardown import CLOSE_TIMEOUT_S, end_all
from rlvr.pipeline.build import build_episode_runners, start_local_judge, start_ray, start_reward_clusters, start_router
from rlvr.pipeline.domain_schedulers import DomainSchedulers
from rlvr.pipeline.eval_weights import engine_key, read_weights
from rlvr.pipeline.faults import FaultLog
from rlvr.pipeline.local_servers import start_local_sandbox
from rlvr.pipeline.preflight import Checked
from rlvr.report.run_data import EVALUATED
from rlvr.runtime.ray_runtime import RAY
from rlvr.runtime.waiter import Waiter
from rlvr.telemetry import console
from rlvr.workers.actor_infer import ActorInferWorker
from rlvr.workers.clusters import ActorInferCluster
from rlvr.workers.placement import Planner


def validation_results(results: list[tuple[dict, dict, list[dict]]], step: int) -> tuple[dict[str, float],
                                                                                         list[dict]]:
    """(metrics, val_samples rows) from each domain's (metrics, counts, examples); val_correct/all/mean is over
    every scored sample of every domain (a domain with more prompts weighs more)."""
    metrics: dict[str, float] = {}
    correct = scored = 0
    for m, counts, _ in results:
        metrics.update(m)
        correct, scored = correct + counts["correct"], scored + counts["scored"]
    if scored:
        metrics["val_correct/all/mean"] = correct / scored
    return metrics, [{"step": step, **ex} for _, _, examples in results for ex in examples]


def append_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "a") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)


class Evaluator:
    def __init__(self, cfg: Config, out_dir: Path):
        """Ray, the servers and the reward clusters for `cfg`'s domains (shared by every model evaluated)."""
        self.cfg, self.out_dir = cfg, out_dir
        self.judge_server = self.sandbox_server = None
        self.rewards: dict = {}
        self.planner: Planner | None = None
        self.owns_ray = False
        # the running actor_infer cluster, its router, what it was built for (engine_key) and its weights' version
        self.infer = self.router = self.infer_key = None
        self.version = 0
        try:
            with console.stage("Ray"):
                self.owns_ray = start_ray(cfg)
            self.waiter = Waiter.from_config(cfg.faults, RAY)
            with console.stage("servers (judge, sandbox, where asked for)"):
                self.judge_server, rewards_cfg = start_local_judge(cfg, log_dir=out_dir / "logs" / "judge_server")
                self.sandbox_server, self.rewards_cfg = start_local_sandbox(cfg, rewards_cfg)
            with console.stage("reward workers"):
                self.planner = Planner(cfg)
                self.rewards = start_reward_clusters(cfg, self.rewards_cfg, self.planner, self.waiter)
        except BaseException:
            self.close()
            raise

    def evaluate(self, cfg: Config, checked: Checked, run_dir: Path, source: dict[str, Any]) -> dict[str, float]:
        """Validation of `checked.model_path` (greedy, or as cfg.validation says) over cfg's validation data:
        writes `run_dir` as a run directory the report reads (config.yaml, metrics.jsonl at step 0,
        val_samples.jsonl, and `source`, what the model is, as evaluated.json) and returns the metrics."""
        run_dir.mkdir(parents=True)
        save_resolved(cfg, run_dir)
        (run_dir / EVALUATED).write_text(json.dumps(source, indent=1))
        schedulers = None
        try:
            self._serve(cfg, checked.model_path)
            endpoints = [self.router] if self.router is not None else list(self.infer.workers)
            schedulers = DomainSchedulers(cfg, checked.data, endpoints,
                                          {d: c.workers for d, c in self.rewards.items()}, self.waiter,
                                          FaultLog(run_dir / "faults.jsonl"),
                                          build_episode_runners(cfg, checked.tokenizer))
            start = time.perf_counter()
            metrics, rows = validation_results(schedulers.validate(0), 0)
            console.say(console.validation_line(0, metrics, time.perf_counter() - start))
        except BaseException:
            self._end_infer()  # a failed model's engine is not trusted with the next one
            raise
        finally:
            end_all([("schedulers", lambda: schedulers is not None and schedulers.kill())])
        append_jsonl(run_dir / "val_samples.jsonl", rows)
        append_jsonl(run_dir / "metrics.jsonl", [{"step": 0, **metrics}])
        return metrics

    def _serve(self, cfg: Config, model_path: str) -> None:
        """An actor_infer cluster serving `model_path`: the running one with these weights loaded, where the model
        differs from its own only in weights, else a new one (the running one ended first)."""
        key = engine_key(model_path)
        if self.infer is not None and key is not None and key == self.infer_key:
            with console.stage(f"weights of {model_path} into the running actor_infer"):
                self.version += 1
                weights = ray.put(read_weights(model_path, cfg.generation.dtype))
                self.waiter.get([w.load_weights.remote(weights, self.version) for w in self.infer.workers],
                                "actor_infer.load_weights")
            return
        self._end_infer()
        with console.stage(f"actor_infer on {model_path}"):
            self.infer = ActorInferCluster.start("actor_infer", ActorInferWorker, cfg.generation.world_size, cfg,
                                                 model_path, max_concurrency=1000,
                                                 max_restarts=cfg.faults.max_restarts, waiter=self.waiter,
                                                 placement=self.planner.actor_infer())
            self.router = start_router(cfg, self.planner, self.infer) if len(self.infer) > 1 else None
        self.infer_key, self.version = key, 0

    def _end_infer(self) -> None:
        infer, router = self.infer, self.router
        self.infer = self.router = self.infer_key = None
        end_all([
            ("generation engines", lambda: infer is not None and ray.get(infer.close_async(), timeout=CLOSE_TIMEOUT_S)),
            ("actor_infer", lambda: infer is not None and infer.kill()),
            ("router", lambda: router is not None and ray.kill(router, no_restart=True)),
        ])

    def close(self) -> None:
        """Everything this evaluator started, each part ended even when an earlier one fails."""
        end_all([
            ("actor_infer", self._end_infer),
            ("reward workers", lambda: ray.get([r for c in self.rewards.values() for r in c.close_async()],
                                               timeout=CLOSE_TIMEOUT_S)),
            ("reward clusters", lambda: [c.kill() for c in self.rewards.values()]),
            ("placement groups", lambda: self.planner is not None and self.planner.release()),
            ("judge server", lambda: self.judge_server is not None and self.judge_server.stop()),
            ("sandbox server", lambda: self.sandbox_server is not None and self.sandbox_server.stop()),
            ("ray", lambda: self.owns_ray and ray.shutdown()),
        ])
