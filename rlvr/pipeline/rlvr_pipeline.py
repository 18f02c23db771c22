"""RLVRPipeline: the driver. It owns the clusters and the per-domain schedulers and runs the step loop."""

from __future__ import annotations

import functools
import logging
import pickle
import time
from contextlib import contextmanager
from pathlib import Path

import ray
import torch
from tqdm import tqdm

from rlvr.config.root import Config
from rlvr.data.batch import TrainBatch
from rlvr.data.types import Group
from rlvr.lifecycle.teardown import CLOSE_TIMEOUT_S, end_all
from rlvr.pipeline import checkpoint
from rlvr.pipeline.advantage_step import AdvantageStep
from rlvr.pipeline.batching import make_train_batch
from rlvr.pipeline.faults import FATAL_FAULTS, run_stopped
from rlvr.pipeline.parts import PipelineParts, build_pipeline
from rlvr.pipeline.records import RECORD_FILES, rewind_records
from rlvr.pipeline.rollout import Rollout, by_domain
from rlvr.pipeline.rollout_correction_step import correct_actor_batch, correction_metrics
from rlvr.pipeline.schedule import StepSchedule
from rlvr.pipeline.validation import append_jsonl, validation_results
from rlvr.report.summary import human_bytes, size_bytes
from rlvr.schedulers.quotas import allocate_quotas
from rlvr.telemetry import console
from rlvr.telemetry.overlap_metrics import merge_parts, overlap_metrics
from rlvr.telemetry.system_metrics import SystemMonitor, throughput_metrics
from rlvr.telemetry.trackers import Trackers
from rlvr.workers.cluster import Cluster

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
    def __init__(self, cfg: Config, parts: PipelineParts | None = None):
        """`parts`: what the loop runs on (rlvr/pipeline/parts.py); None starts the real ones for `cfg`."""
        self.cfg = cfg
        parts = build_pipeline(cfg) if parts is None else parts
        self.run_dir, self.tokenizer = parts.run_dir, parts.tokenizer
        # How the loop waits and reads the clock: every wait goes through `self.waiter`, built on this runtime,
        # and the phase timer reads its clock (the simulator's is virtual time).
        self.runtime, self.waiter, self.faults = parts.runtime, parts.waiter, parts.faults
        self.clusters, self.schedulers = parts.clusters, parts.schedulers
        self.judge_server, self.sandbox_server, self.owns_ray = parts.judge_server, parts.sandbox_server, parts.owns_ray
        self.owns_clusters = parts.owns_clusters
        self.domains = list(cfg.domains)  # the order of the batch's domain_index
        self.advantages = AdvantageStep(cfg)  # KL controller and running reward moments live across steps
        self.step, self.quota_credit, run_id = 0, {}, None
        self.schedule = StepSchedule.from_config(cfg)  # when the loop waits on what (the overlap modes)
        if parts.resume_from:
            run_id = self._restore(parts.resume_from)
            rewind_records(self.run_dir, self.step)  # the killed run's records from this step on are re-made
        self.trackers = parts.trackers or Trackers(
            cfg.trackers, self.run_dir, self.run_dir.name, cfg.model_dump(mode="json"), run_id,
            resume_step=self.step if parts.resume_from else None)
        self.system = parts.system or SystemMonitor.for_pipeline(self)
        self.last_val: float | None = None

    # ------------------------------------------------------------------ the loop
    def run(self) -> Path:
        cfg = self.cfg.run
        bar = tqdm(total=cfg.max_steps, initial=self.step, desc="rlvr", disable=not cfg.progress_bar, unit="step")
        try:
            while self.step < cfg.max_steps:
                self.faults.step = self.step
                timer, metrics = PhaseTimer(self.runtime.now), {}
                with timer("model_update"):
                    metrics.update(self.model_update())
                if cfg.eval_every and self.step % cfg.eval_every == 0:
                    with timer("val"):
                        metrics.update(self.val())
                rollout = self.schedule.rollout(self.step, cfg.max_steps, self.start_rollout, timer.add)
                metrics.update(self.learn(rollout, timer))
                metrics.update(timer.times)
                metrics.update(overlap_metrics(metrics, self.cfg))
                metrics.update(throughput_metrics(metrics) | self.system.sample())
                metrics.update(self.faults.pop_metrics())
                self.trackers.log(metrics, self.step)
                self.step += 1
                if cfg.save_every and self.step % cfg.save_every == 0:
                    self.save()
                bar.set_postfix(console.progress_postfix(metrics, self.last_val))
                bar.update(1)
            if cfg.eval_every:  # the trained policy's final score, logged at step = max_steps
                self.model_update()
                self.trackers.log(self.val(), self.step)
        except FATAL_FAULTS as err:
            raise run_stopped(err, self.run_dir, self.step) from err
        finally:
            bar.close()
        return self.run_dir

    def start_rollout(self, step: int) -> Rollout:
        credit_before = self.quota_credit
        quotas, self.quota_credit = allocate_quotas(self.cfg.rollout.domain_interleave_probs,
                                                    self.cfg.rollout.prompts_per_step, self.quota_credit)
        rollout = Rollout(self.schedulers, quotas, step, version=step)
        rollout.credit_before = credit_before  # a checkpoint taken while it is in flight saves this
        return rollout

    def learn(self, rollout: Rollout, timer: PhaseTimer) -> dict[str, float]:
        """Trains on the rollout's groups, part by part as the schedule hands them over (the whole batch, or each
        mini-batch of whole groups as soon as its rewards are in, with one LR-schedule step for the step)."""
        per_part = self.schedule.lr_step_per_part
        parts = [self.train_on(by_domain(groups), timer, step_lr=per_part) for groups in self.schedule.parts(rollout)]
        if not per_part and parts:
            self.clusters.actor_train.lr_step()
            if self.clusters.critic is not None:
                self.clusters.critic.lr_step()
        timer.add("reward_wait", rollout.wait_s)
        metrics = {**rollout.metrics, **merge_parts(parts)}
        if not parts:  # every domain fell short (filters, exhausted refill): log it and go on, never crash
            metrics["batch/skipped_step"] = 1.0
            log.warning("step %d: no group kept in any domain; training skipped", self.step)
        return metrics

    def train_on(self, groups: dict[str, list[Group]], timer: PhaseTimer, step_lr: bool) -> dict[str, float]:
        """Batch -> forward passes (reference / old-policy logprobs, values; concurrently) -> advantages ->
        critic update -> actor update (after the critic's warm-up)."""
        with timer("batch"):
            batch, samples, metrics = make_train_batch(groups, self.domains, self.tokenizer.pad_token_id or 0,
                                                       seed=self.cfg.run.seed + self.step,
                                                       mask_truncated=self.cfg.rollout.mask_truncated)
        staleness = [self.step - s.policy_version for s in samples]
        metrics.update({"batch/staleness/mean": sum(staleness) / len(staleness),
                        "batch/staleness/max": float(max(staleness))})
        with timer("forwards"):
            batch = self.forwards(batch)
        with timer("advantages"):
            batch, adv_metrics = self.advantages(batch)
            metrics.update(adv_metrics)
        if self.clusters.critic is not None:
            with timer("critic_train"):
                metrics.update(self.clusters.critic.train(batch, step_lr))
        if self.step < self.cfg.critic.critic_warmup and self.clusters.critic is not None:
            metrics["actor/critic_warmup"] = 1.0  # only the critic trains this step
            return metrics
        rc = self.cfg.algorithm.rollout_correction
        if self.measures_mismatch(batch) and self.cfg.corrects_in_update:  # weights in the update, metrics after
            with timer("train"):
                actor_metrics, train_logp = self.clusters.actor_train.train_with_logprobs(batch, step_lr)
            return {**metrics, **actor_metrics, **correction_metrics(batch, train_logp, rc)}
        if self.measures_mismatch(batch):
            train_logp = batch.get("train_logp")
            batch, corr_metrics = correct_actor_batch(batch, batch["old_logp"] if train_logp is None else train_logp,
                                                      rc)
            metrics.update(corr_metrics)
        with timer("train"):
            metrics.update(self.clusters.actor_train.train(batch, step_lr))
        return metrics

    def forwards(self, batch: TrainBatch) -> TrainBatch:
        """The forward passes the step needs, in flight together on their own clusters: reference logprobs (a KL
        term), old-policy logprobs (the PPO ratio's anchor when it is not simply the current policy, and the
        policy side of a KL in the reward), the critic's values."""
        shared = self.runtime.put(batch)  # one copy in the object store for every cluster
        c = self.clusters
        pending: dict[str, tuple[Cluster, list[ray.ObjectRef]]] = {}
        if c.reference is not None:
            pending["ref_logp"] = (c.reference, c.reference.compute_logprobs_async(shared))
        elif self.cfg.needs_reference:  # actor_train.lora: the base model is actor_train's with adapters off
            pending["ref_logp"] = (c.actor_train, c.actor_train.reference_logprobs_async(shared))
        if c.critic is not None:
            pending["values"] = (c.critic, c.critic.compute_values_async(shared))
        anchor = self.old_logprobs_source(batch)
        if anchor == "actor":
            pending["old_logp"] = (c.actor_train, c.actor_train.compute_logprobs_async(shared))
        else:
            # the trainer's side of rollout_corr/*, which old_logp is not here and the update does not give
            if self.measures_mismatch(batch) and not self.cfg.corrects_in_update:
                pending["train_logp"] = (c.actor_train, c.actor_train.compute_logprobs_async(shared))
            if anchor == "behaviour":  # data the trainer can no longer recompute
                batch = batch.with_tensor("old_logp", batch["behav_logp"])
        for key, (cluster, refs) in pending.items():  # all launched already: waiting in turn costs nothing
            batch = batch.with_tensor(key, cluster.collected(refs, f"forward ({key})"))
        return batch

    def old_logprobs_source(self, batch: TrainBatch) -> str | None:
        """Where old_logp, the policy the PPO ratio is taken against, comes from when it is not simply the current
        one: "actor" (the trainer's weights now: the proximal policy (decoupled), or the behaviour one
        (synchronous)), "behaviour" (the engine's logprobs), or None."""
        algo = self.cfg.algorithm
        if self.cfg.uses_behaviour_logprobs and batch.get("behav_logp") is None:
            raise RuntimeError("the behaviour logprobs of the samples are missing: overlap.*, "
                               "algorithm.decoupled_loss and algorithm.rollout_correction need an engine that "
                               "returns them")
        needed = self.needs_old_logprobs or algo.use_kl_in_reward  # the KL in the reward is the samples' policy's
        if algo.decoupled_loss or (needed and not self.cfg.trains_on_stale_data):
            return "actor"
        if self.cfg.trains_on_stale_data:
            return "behaviour"
        return None

    def measures_mismatch(self, batch: TrainBatch) -> bool:
        """rollout_corr/* this step: behaviour logprobs at hand, and the metrics or a correction asked for."""
        rc = self.cfg.algorithm.rollout_correction
        return batch.get("behav_logp") is not None and (rc.metrics or rc.active)

    @property
    def needs_old_logprobs(self) -> bool:
        """With one optimizer step per batch the behaviour policy *is* the current one: no extra forward."""
        return not self.cfg.single_update

    # ------------------------------------------------------------------ phases
    def model_update(self) -> dict[str, float]:
        """actor_train -> actor_infer weights (collective broadcast, or the object store), then a parity check."""
        metrics = self.clusters.weight_sync.push(self.step)
        every = self.cfg.actor_train.weight_sync_check_every
        if not every or self.step % every:
            return metrics
        diff = self.weight_sync_diff()
        tolerance = 1e-3 if self.cfg.generation.dtype == "float32" else 0.5
        if diff > tolerance:
            raise RuntimeError(f"weight sync check failed at step {self.step}: actor_infer logprobs differ from "
                               f"actor_train by {diff:.3g} (> {tolerance})")
        return {**metrics, "actor/weight_sync_logprob_max_diff": diff}

    def weight_sync_diff(self) -> float:
        # both sides at once (each is one short forward): the probe costs the slower of the two, not their sum
        train = self.clusters.actor_train.sequence_logprobs_async([self.sync_probe])
        infer = self.clusters.actor_infer.sequence_logprobs_async([self.sync_probe])
        train = self.clusters.actor_train.collected(train, "sequence_logprobs")[0]
        infers = self.waiter.get(infer, "actor_infer.sequence_logprobs")
        return max(abs(a - b) for infer in infers for a, b in zip(train[1:], infer[0][1:]))

    def val(self) -> dict[str, float]:
        start = time.perf_counter()
        metrics, rows = validation_results(self.schedulers.validate(self.step), self.step)
        append_jsonl(self.run_dir / "val_samples.jsonl", rows)
        self.last_val = metrics.get("val_correct/all/mean")
        self.trackers.log_val_samples(rows, self.step)
        console.say(console.validation_line(self.step, metrics, time.perf_counter() - start))
        return metrics

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> Path:
        tmp = checkpoint.begin(self.run_dir, self.step)
        saving = self.clusters.actor_train.save_async(str(tmp / "actor_train"))
        if self.clusters.critic is not None:
            saving += self.clusters.critic.save_async(str(tmp / "critic"))
        self.waiter.get(saving, "actor_train/critic.save")
        torch.save(self.clusters.actor_infer.rng_states(), tmp / "actor_infer_rng.pt")
        schedulers = self.schedulers.state_dicts()
        with open(tmp / "scheduler_buffers.pkl", "wb") as f:  # finished groups waiting for the next step
            pickle.dump({d: st.pop("buffer") for d, st in schedulers.items()}, f)
        # A rollout started ahead (off-policy) is saved as not started: the schedulers give its prompts back.
        ahead = self.schedule.ahead
        credit = ahead.credit_before if ahead is not None else self.quota_credit
        state = {"step": self.step, "quota_credit": credit, "tracker_run_id": self.trackers.run_id,
                 "schedulers": schedulers, "advantages": self.advantages.state_dict()}
        final = checkpoint.commit(self.run_dir, tmp, self.step, state, self.cfg.run.keep_checkpoints,
                                  records=tuple(self.run_dir / name for name in RECORD_FILES),
                                  keep_optimizer=self.cfg.run.keep_optimizer)
        console.say(f"checkpoint @ step {self.step}: {human_bytes(size_bytes(final))} ({final})")
        return final

    def _restore(self, ckpt: Path) -> str:
        state = checkpoint.load_driver_state(ckpt)
        loading = self.clusters.actor_train.load_async(str(ckpt / "actor_train"))
        if self.clusters.critic is not None:
            if not (ckpt / "critic").is_dir():
                raise FileNotFoundError(f"{ckpt}: no critic/ to resume the critic from (saved by a run without one?)")
            loading += self.clusters.critic.load_async(str(ckpt / "critic"))
        self.waiter.get(loading, "actor_train/critic.load")
        self.advantages.load_state_dict(state.get("advantages", {}))
        rngs = torch.load(ckpt / "actor_infer_rng.pt")
        self.waiter.get([w.set_rng_state.remote(r) for w, r in zip(self.clusters.actor_infer.workers, rngs)],
                        "actor_infer.set_rng_state")
        with open(ckpt / "scheduler_buffers.pkl", "rb") as f:
            buffers = pickle.load(f)
        self.schedulers.load({d: {**s, "buffer": buffers.get(d, [])} for d, s in state["schedulers"].items()})
        self.step, self.quota_credit = state["step"], state["quota_credit"]
        log.info("resumed from %s at step %d", ckpt, self.step)
        return state["tracker_run_id"]

    @functools.cached_property
    def sync_probe(self) -> list[int]:
        """A fixed short sequence whose logprobs both sides compute after every sync. Short: every weight takes
        part whatever the length, and the probe is compute on both sides (on 2 CPU cores the default model's
        48-token chat probe took a median 0.85 s per step, this one 0.38 s; docs/scaling.md)."""
        return list(self.tokenizer("2 + 3 = 5. 4 + 4 = 8.")["input_ids"])

    def close(self) -> None:
        """Trackers flushed, reward pools and generation engines closed, every actor of this pipeline gone (the
        Ray cluster stays up when it was not ours to start). Each part is ended even when an earlier one fails
        (after Ctrl-C an actor may be dead already); the failures are logged. Clusters the run does not own
        (`PipelineParts.owns_clusters`) are left as they are."""
        clusters = self.clusters
        console.drain_worker_output()  # a worker's last lines (an error's traceback) reach its log first
        own_run = [("trackers", self.trackers.close), ("the step started ahead", self.schedule.cancel_ahead)]
        engines = [
            ("reward workers", lambda: ray.get([r for c in clusters.rewards.values() for r in c.close_async()],
                                               timeout=CLOSE_TIMEOUT_S)),
            ("generation engines", lambda: ray.get(clusters.actor_infer.close_async(), timeout=CLOSE_TIMEOUT_S)),
        ]
        schedulers = [("schedulers", self.schedulers.kill)]
        actors_and_servers = [
            ("clusters", lambda: [c.kill() for c in (clusters.actor_train, clusters.actor_infer, clusters.reference,
                                                     clusters.critic, *clusters.rewards.values()) if c is not None]),
            ("router and placement groups", clusters.release),
            ("judge server", lambda: self.judge_server is not None and self.judge_server.stop()),
            ("sandbox server", lambda: self.sandbox_server is not None and self.sandbox_server.stop()),
            ("ray", lambda: self.owns_ray and ray.shutdown()),
        ]
        # clusters shared with later runs stay up (their builder ends them); the run's schedulers go either way
        end_all(own_run + engines + schedulers + actors_and_servers if self.owns_clusters else own_run + schedulers)
