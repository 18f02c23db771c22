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
from rlvr.pipeline.build import build_clusters, load_domain_data, new_run_dir, start_ray
from rlvr.pipeline.trackers import Trackers
from rlvr.schedulers.dynamic_sampling import DynamicSamplingScheduler
from rlvr.schedulers.quotas import allocate_quotas

log = logging.getLogger(__name__)


class PhaseTimer:
    def __init__(self):
        self.times: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str):
        start = time.perf_counter()
        yield
        self.times[f"time/{phase}"] = time.perf_counter() - start


class RLVRPipeline:
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
        self.clusters = build_clusters(cfg, self.model_path)
        scheduler_cls = ray.remote(DynamicSamplingScheduler).options(num_cpus=0, max_concurrency=1000)
        self.schedulers = {
            d: scheduler_cls.remote(d, self.data[d].train, self.data[d].val, self.clusters.actor_infer.workers,
                                    self.clusters.rewards[d].workers, cfg)
            for d in cfg.domains}
        self.step, self.quota_credit, run_id = 0, {}, None
        if resume_from:
            run_id = self._restore(resume_from)
        self.trackers = Trackers(cfg.trackers, self.run_dir, self.run_dir.name, cfg.model_dump(mode="json"), run_id)
        self.sync_probe = self._make_sync_probe()

    # ------------------------------------------------------------------ the loop
    def run(self) -> Path:
        cfg = self.cfg.run
        bar = tqdm(total=cfg.max_steps, initial=self.step, desc="rlvr", disable=not cfg.progress_bar, unit="step")
        try:
            while self.step < cfg.max_steps:
                timer, metrics = PhaseTimer(), {}
                with timer("model_update"):
                    metrics.update(self.model_update())
                if cfg.eval_every and self.step % cfg.eval_every == 0:
                    with timer("val"):
                        metrics.update(self.val())
                with timer("rollout"):
                    groups, rollout_metrics = self.rollout()
                metrics.update(rollout_metrics)
                if any(groups.values()):
                    metrics.update(self.learn(groups, timer))
                else:  # every domain fell short (filters, exhausted refill): log it and go on, never crash
                    metrics["batch/skipped_step"] = 1.0
                    log.warning("step %d: no group kept in any domain; training skipped", self.step)
                metrics.update(timer.times)
                metrics["time/step"] = sum(timer.times.values())
                metrics["system/response_tokens_per_s"] = metrics.get("batch/response_tokens", 0.0) / max(
                    timer.times["time/rollout"], 1e-9)
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

    def learn(self, groups: dict[str, list[Group]], timer: PhaseTimer) -> dict[str, float]:
        """Advantages, optional reference / old-policy logprobs, then the actor update."""
        with timer("advantages"):
            batch, _, metrics = make_train_batch(groups, self.cfg.algorithm, self.tokenizer.pad_token_id or 0,
                                                 seed=self.cfg.run.seed + self.step,
                                                 mask_truncated=self.cfg.rollout.mask_truncated)
        if self.clusters.reference is not None:
            with timer("reference"):
                batch = batch.with_tensor("ref_logp", self.clusters.reference.first("compute_logprobs", batch))
        if self.needs_old_logprobs:
            with timer("old_logprobs"):
                batch = batch.with_tensor("old_logp", self.clusters.actor_train.first("compute_logprobs", batch))
        with timer("train"):
            metrics.update(self.train(batch))
        return metrics

    @property
    def needs_old_logprobs(self) -> bool:
        """With one optimizer step per batch the behaviour policy *is* the current one: no extra forward."""
        t = self.cfg.actor_train
        return t.ppo_epochs > 1 or (t.mini_batch_size is not None and t.mini_batch_size < self.cfg.train_batch_size)

    # ------------------------------------------------------------------ phases
    def model_update(self) -> dict[str, float]:
        """actor_train -> actor_infer weights (through the object store, no driver copy), then a parity check."""
        weights = self.clusters.actor_train.workers[0].weights_for_sync.remote()
        ray.get(self.clusters.actor_infer.call("load_weights", weights, self.step))
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
        train = self.clusters.actor_train.first("sequence_logprobs", [self.sync_probe])[0]
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

    def rollout(self) -> tuple[dict[str, list[Group]], dict[str, float]]:
        quotas, self.quota_credit = allocate_quotas(self.cfg.rollout.domain_interleave_probs,
                                                    self.cfg.rollout.prompts_per_step, self.quota_credit)
        active = {d: q for d, q in quotas.items() if q > 0}
        refs = {d: self.schedulers[d].get_batch.remote(q, self.step, self.step) for d, q in active.items()}
        groups, metrics = {}, {f"{d}/scheduler/quota": float(q) for d, q in quotas.items()}
        for d, (g, m) in zip(refs, ray.get(list(refs.values()))):
            groups[d] = g
            metrics.update(m)
        return groups, metrics

    def train(self, batch: TrainBatch) -> dict[str, float]:
        return self.clusters.actor_train.first("train", batch)

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> Path:
        tmp = checkpoint.begin(self.run_dir, self.step)
        self.clusters.actor_train.first("save", str(tmp / "actor_train"))
        torch.save(self.clusters.actor_infer.gather("rng_state"), tmp / "actor_infer_rng.pt")
        schedulers = dict(zip(self.schedulers, ray.get([s.state_dict.remote() for s in self.schedulers.values()])))
        with open(tmp / "scheduler_buffers.pkl", "wb") as f:  # finished groups waiting for the next step
            pickle.dump({d: st.pop("buffer") for d, st in schedulers.items()}, f)
        state = {"step": self.step, "quota_credit": self.quota_credit, "tracker_run_id": self.trackers.run_id,
                 "schedulers": schedulers}
        return checkpoint.commit(self.run_dir, tmp, self.step, state, self.cfg.run.keep_checkpoints)

    def _restore(self, ckpt: Path) -> str:
        state = checkpoint.load_driver_state(ckpt)
        self.clusters.actor_train.first("load", str(ckpt / "actor_train"))
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
        for cluster in self.clusters.rewards.values():
            ray.get(cluster.call("close"))
        for actor in self.schedulers.values():
            ray.kill(actor, no_restart=True)
        for cluster in (self.clusters.actor_train, self.clusters.actor_infer, self.clusters.reference,
                        *self.clusters.rewards.values()):
            if cluster is not None:
                cluster.kill()
        if self.owns_ray:
            ray.shutdown()
