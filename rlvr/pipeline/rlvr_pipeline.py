"""RLVRPipeline: the driver. It owns the clusters and the per-domain schedulers and runs the step loop."""

from __future__ import annotations

import json
import logging
import pickle
import time
from contextlib import contextmanager
from pathlib import Path

import ray
import torch
from tqdm import tqdm
from transformers import AutoTokenizer

from rlvr.config import Config, save_resolved
from rlvr.data.batch import TrainBatch
from rlvr.data.types import Group
from rlvr.models.default_model import resolve_model_path
from rlvr.pipeline import checkpoint
from rlvr.pipeline.batching import make_train_batch
from rlvr.pipeline.build import build_clusters, load_domain_data, new_run_dir, start_local_judge, start_ray
from rlvr.pipeline.overlap_metrics import merge_parts, overlap_metrics
from rlvr.pipeline.rollout import Rollout, by_domain
from rlvr.pipeline.trackers import Trackers
from rlvr.schedulers.dynamic_sampling import DynamicSamplingScheduler
from rlvr.schedulers.quotas import allocate_quotas
from rlvr.workers.runtime import RAY

log = logging.getLogger(__name__)


class PhaseTimer:
    """Seconds per phase of one step; a phase entered several times (per mini-batch) adds up."""

    def __init__(self, clock=time.perf_counter):
        self.times: dict[str, float] = {}
        self.clock = clock

    @contextmanager
    def __call__(self, phase: str):
        start = self.clock()
        yield
        self.add(phase, self.clock() - start)

    def add(self, phase: str, seconds: float) -> None:
        self.times[f"time/{phase}"] = self.times.get(f"time/{phase}", 0.0) + seconds


class RLVRPipeline:
    runtime = RAY  # how the loop waits and reads the clock; the simulator (rlvr/sim) swaps in virtual time

    def __init__(self, cfg: Config):
        self.cfg = cfg
        resume_from = (checkpoint.find_resume_point(Path(cfg.run.output_dir), cfg.run.name, cfg.run.resume)
                       if cfg.run.resume else None)
        self.run_dir = resume_from.parent.parent if resume_from else new_run_dir(cfg)
        save_resolved(cfg, self.run_dir)
        self.model_path = resolve_model_path(cfg.model.path, cfg.model.cache_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.data = load_domain_data(cfg, self.tokenizer)
        self.owns_ray = start_ray(cfg)
        self.judge_server, rewards_cfg = start_local_judge(cfg)
        self.clusters = build_clusters(cfg, self.model_path, rewards_cfg)
        scheduler_cls = ray.remote(DynamicSamplingScheduler).options(num_cpus=0, max_concurrency=1000)
        self.schedulers = {
            d: scheduler_cls.remote(d, self.data[d].train, self.data[d].val, self.clusters.actor_infer.workers,
                                    self.clusters.rewards[d].workers, cfg)
            for d in cfg.domains}
        self.step, self.quota_credit, run_id = 0, {}, None
        self.ahead: Rollout | None = None  # next step's rollout, started early (one-step off-policy)
        if resume_from:
            run_id = self._restore(resume_from)
        self.trackers = Trackers(cfg.trackers, self.run_dir, self.run_dir.name, cfg.model_dump(mode="json"), run_id)
        self.sync_probe = self._make_sync_probe()

    # ------------------------------------------------------------------ the loop
    def run(self) -> Path:
        cfg, overlap = self.cfg.run, self.cfg.overlap
        bar = tqdm(total=cfg.max_steps, initial=self.step, desc="rlvr", disable=not cfg.progress_bar, unit="step")
        try:
            while self.step < cfg.max_steps:
                timer, metrics = PhaseTimer(self.runtime.now), {}
                with timer("model_update"):
                    metrics.update(self.model_update())
                if cfg.eval_every and self.step % cfg.eval_every == 0:
                    with timer("val"):
                        metrics.update(self.val())
                rollout, self.ahead = self.ahead or self.start_rollout(self.step), None
                if overlap.one_step_off_policy and self.step + 1 < cfg.max_steps:
                    # Colocated, as in the recipe: the next step generates now, with the weights just synced,
                    # and its rewards come in while this step trains.
                    self.ahead = self.start_rollout(self.step + 1)
                    timer.add("generate_ahead", self.ahead.wait_generated())
                elif not overlap.mini_batch_pipeline:
                    timer.add("generate", rollout.wait_generated())
                metrics.update(self.learn(rollout, timer))
                metrics.update(timer.times)
                metrics.update(overlap_metrics(metrics, self.cfg))
                self.trackers.log(metrics, self.step)
                self.step += 1
                if cfg.save_every and self.step % cfg.save_every == 0:
                    self.save()
                bar.set_postfix({k.split("/")[0]: f"{v:.3f}" for k, v in metrics.items()
                                 if k.endswith("reward/mean") and not k.startswith("val")})
                bar.update(1)
            if cfg.eval_every:  # the trained policy's final score, logged at step = max_steps
                self.model_update()
                self.trackers.log(self.val(), self.step)
        finally:
            bar.close()
        return self.run_dir

    def start_rollout(self, step: int) -> Rollout:
        credit_before = self.quota_credit
        quotas, self.quota_credit = allocate_quotas(self.cfg.rollout.domain_interleave_probs,
                                                    self.cfg.rollout.prompts_per_step, self.quota_credit)
        rollout = Rollout(self.schedulers, quotas, step, version=step, runtime=self.runtime)
        rollout.credit_before = credit_before  # a checkpoint taken while it is in flight saves this
        return rollout

    def learn(self, rollout: Rollout, timer: PhaseTimer) -> dict[str, float]:
        """Trains on the rollout's groups: all at once, or (mini-batch pipeline) each mini-batch of whole groups
        as soon as its rewards are in, with one LR-schedule step for the global step."""
        pipelined = self.cfg.overlap.mini_batch_pipeline
        per_batch = self.cfg.actor_train.mini_batch_size // self.cfg.rollout.group_size if pipelined else None
        parts: list[dict[str, float]] = []
        for groups in rollout.stream(per_batch):
            parts.append(self.train_on(by_domain(groups), timer, step_lr=not pipelined))
        if pipelined and parts:
            self.clusters.actor_train.gather("lr_step")  # every rank has its own schedule
        timer.add("reward_wait", rollout.wait_s)
        metrics = {**rollout.metrics, **merge_parts(parts)}
        if not parts:  # every domain fell short (filters, exhausted refill): log it and go on, never crash
            metrics["batch/skipped_step"] = 1.0
            log.warning("step %d: no group kept in any domain; training skipped", self.step)
        return metrics

    def train_on(self, groups: dict[str, list[Group]], timer: PhaseTimer, step_lr: bool) -> dict[str, float]:
        """Advantages, optional reference / old-policy logprobs, then the actor update."""
        with timer("advantages"):
            batch, samples, metrics = make_train_batch(groups, self.cfg.algorithm, self.tokenizer.pad_token_id or 0,
                                                       seed=self.cfg.run.seed + self.step,
                                                       mask_truncated=self.cfg.rollout.mask_truncated)
        staleness = [self.step - s.policy_version for s in samples]
        metrics.update({"batch/staleness/mean": sum(staleness) / len(staleness),
                        "batch/staleness/max": float(max(staleness))})
        if self.clusters.reference is not None:
            with timer("reference"):
                batch = batch.with_tensor("ref_logp", self.clusters.reference.collective("compute_logprobs", batch))
        with timer("old_logprobs"):
            batch = self.anchored(batch)
        with timer("train"):
            metrics.update(self.clusters.actor_train.collective("train", batch, step_lr))
        return metrics

    def anchored(self, batch: TrainBatch) -> TrainBatch:
        """Sets old_logp, the policy the PPO ratio is taken against, when it is not simply the current one."""
        algo = self.cfg.algorithm
        if self.cfg.uses_behaviour_logprobs and batch.get("behav_logp") is None:
            raise RuntimeError("the behaviour logprobs of the samples are missing: overlap.* and "
                               "algorithm.decoupled_loss need an engine that returns them")
        if algo.decoupled_loss or (self.needs_old_logprobs and not self.cfg.uses_behaviour_logprobs):
            # the trainer's weights now: the proximal policy (decoupled), or the behaviour one (synchronous)
            return batch.with_tensor("old_logp", self.clusters.actor_train.collective("compute_logprobs", batch))
        if self.cfg.uses_behaviour_logprobs:
            return batch.with_tensor("old_logp", batch["behav_logp"])  # data the trainer can no longer recompute
        return batch

    @property
    def needs_old_logprobs(self) -> bool:
        """With one optimizer step per batch the behaviour policy *is* the current one: no extra forward."""
        t = self.cfg.actor_train
        return t.ppo_epochs > 1 or (t.mini_batch_size is not None and t.mini_batch_size < self.cfg.train_batch_size)

    # ------------------------------------------------------------------ phases
    def model_update(self) -> dict[str, float]:
        """actor_train -> actor_infer weights (through the object store, no driver copy), then a parity check."""
        weights, *others = self.clusters.actor_train.call("weights_for_sync")  # every rank (ZeRO gathers); rank 0's
        ray.get(self.clusters.actor_infer.call("load_weights", weights, self.step) + others)
        every = self.cfg.actor_train.weight_sync_check_every
        if not every or self.step % every:
            return {}
        diff = self.weight_sync_diff()
        tolerance = 1e-3 if self.cfg.generation.dtype == "float32" else 0.5
        if diff > tolerance:
            raise RuntimeError(f"weight sync check failed at step {self.step}: actor_infer logprobs differ from "
                               f"actor_train by {diff:.3g} (> {tolerance})")
        return {"actor/weight_sync_logprob_max_diff": diff}

    def weight_sync_diff(self) -> float:
        train = self.clusters.actor_train.collective("sequence_logprobs", [self.sync_probe])[0]
        infers = self.clusters.actor_infer.gather("sequence_logprobs", [self.sync_probe])
        return max(abs(a - b) for infer in infers for a, b in zip(train[1:], infer[0][1:]))

    def val(self) -> dict[str, float]:
        results = ray.get([s.validate.remote(self.step) for s in self.schedulers.values()])
        metrics: dict[str, float] = {}
        correct = scored = 0
        with open(self.run_dir / "val_samples.jsonl", "a") as f:
            for m, counts, examples in results:
                metrics.update(m)
                correct, scored = correct + counts["correct"], scored + counts["scored"]
                for ex in examples:
                    f.write(json.dumps({"step": self.step, **ex}) + "\n")
        if scored:
            metrics["val_correct/all/mean"] = correct / scored
        tqdm.write(f"step {self.step} validation: " + ", ".join(
            f"{k} = {v:.3f}" for k, v in sorted(metrics.items()) if k.startswith("val_correct/")))
        return metrics

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> Path:
        tmp = checkpoint.begin(self.run_dir, self.step)
        self.clusters.actor_train.collective("save", str(tmp / "actor_train"))
        torch.save(self.clusters.actor_infer.gather("rng_state"), tmp / "actor_infer_rng.pt")
        schedulers = dict(zip(self.schedulers, ray.get([s.state_dict.remote() for s in self.schedulers.values()])))
        with open(tmp / "scheduler_buffers.pkl", "wb") as f:  # finished groups waiting for the next step
            pickle.dump({d: st.pop("buffer") for d, st in schedulers.items()}, f)
        # A rollout started ahead (off-policy) is saved as not started: the schedulers give its prompts back.
        credit = self.ahead.credit_before if self.ahead is not None else self.quota_credit
        state = {"step": self.step, "quota_credit": credit, "tracker_run_id": self.trackers.run_id,
                 "schedulers": schedulers}
        return checkpoint.commit(self.run_dir, tmp, self.step, state, self.cfg.run.keep_checkpoints)

    def _restore(self, ckpt: Path) -> str:
        state = checkpoint.load_driver_state(ckpt)
        self.clusters.actor_train.collective("load", str(ckpt / "actor_train"))
        for worker, rng in zip(self.clusters.actor_infer.workers, torch.load(ckpt / "actor_infer_rng.pt")):
            ray.get(worker.set_rng_state.remote(rng))
        with open(ckpt / "scheduler_buffers.pkl", "rb") as f:
            buffers = pickle.load(f)
        ray.get([self.schedulers[d].load_state_dict.remote({**s, "buffer": buffers.get(d, [])})
                 for d, s in state["schedulers"].items()])
        self.step, self.quota_credit = state["step"], state["quota_credit"]
        log.info("resumed from %s at step %d", ckpt, self.step)
        return state["tracker_run_id"]

    def _make_sync_probe(self) -> list[int]:
        """A fixed chat-formatted sequence whose logprobs both sides compute after every sync."""
        messages = [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "2 + 3 = 5."}]
        ids = self.tokenizer.apply_chat_template(messages, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def close(self) -> None:
        """Trackers flushed, reward pools closed, every actor of this pipeline gone (the Ray cluster stays up
        when it was not ours to start)."""
        self.trackers.close()
        if self.ahead is not None:  # a started step that will never be trained
            self.ahead.cancel()
        for cluster in self.clusters.rewards.values():
            ray.get(cluster.call("close"))
        for actor in self.schedulers.values():
            ray.kill(actor, no_restart=True)
        for cluster in (self.clusters.actor_train, self.clusters.actor_infer, self.clusters.reference,
                        *self.clusters.rewards.values()):
            if cluster is not None:
                cluster.kill()
        if self.judge_server is not None:
            self.judge_server.stop()
        if self.owns_ray:
            ray.shutdown()
