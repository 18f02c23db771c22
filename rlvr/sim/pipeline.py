"""A training run in simulated time: rlvr's own step loop over the simulation fakes.

`simulate(spec, mode)` runs RLVRPipeline.run() itself (start_rollout, learn, train_on with its forwards and
AdvantageStep, Rollout's streaming through DomainSchedulers, the driver's Waiter with its deadlines, the
DynamicSamplingScheduler, the RewardActor and RewardWorker's concurrency and deadlines, ActorInferWorker's
admission, batching and advantages) on a `VirtualClockLoop`: generation, weight sync, training and every
reward call take the simulated seconds of `spec`, so a step of 1,024 prompts x 5 samples with 1-40 s reward
calls takes a couple of seconds of wall time. Only start-up (no Ray, no model, no data files), the weight
sync's content and the supervision of worker faults (nothing dies in a simulation: no Supervisor, no restarts)
are the simulator's own.

    from rlvr.sim.pipeline import OVERLAP_MODES, SimSpec, simulate, steady
    records = simulate(SimSpec(prompts_per_step=1024, concurrency=256, ...), OVERLAP_MODES["streaming"])
    steady(records, spec, "time/step")       # mean over the steps after the warm-up
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from types import SimpleNamespace

from rlvr.config.load import config_from_dict
from rlvr.config.root import Config
from rlvr.data.types import Prompt
from rlvr.pipeline.build import Clusters
from rlvr.pipeline.domain_schedulers import DomainSchedulers
from rlvr.pipeline.faults import FaultLog
from rlvr.pipeline.parts import PipelineParts
from rlvr.pipeline.rlvr_pipeline import RLVRPipeline
from rlvr.runtime.waiter import Waiter
from rlvr.schedulers.dynamic_sampling import DynamicSamplingScheduler
from rlvr.sim import OVERLAP_MODES  # noqa: F401  (re-exported: simulate(spec, OVERLAP_MODES[name]))
from rlvr.sim.clock import SimRuntime
from rlvr.sim.fakes import SimDevice, SimEngine, SimInferWorker, SimLatencyReward, SimTrainWorker
from rlvr.sim.latency import LatencyModel
from rlvr.workers.clusters import ActorInferCluster, ActorTrainCluster, RewardCluster
from rlvr.workers.rewards.reward_actor import RewardActor

DOMAIN = "judge"


@dataclass(frozen=True)
class SimSpec:
    """One simulated setup. Durations are per step of `prompts_per_step` x `group_size` samples and scale with
    the sequences a phase handles (generation and old-logprob passes per sequence, training per mini-batch)."""

    prompts_per_step: int
    concurrency: int  # reward calls in flight (reward.max_concurrency, one reward worker)
    latency: LatencyModel
    generate_s: float
    train_s: float  # all mini-batches of a step (advantages included)
    model_update_s: float = 0.0
    old_logprobs_s: float = 0.0  # the extra forward pass of the synchronous loop with several mini-batches
    # what generation costs more when samples carry behaviour logprobs (the overlapped modes anchor on them): one
    # more forward pass in HFEngine; about free in vLLM, which returns the sampled tokens' logprobs as it goes
    behaviour_logprobs_s: float = 0.0
    group_size: int = 5
    mini_batches: int = 4
    engine_batches: int = 4  # generation finishes in this many waves (HFEngine batches of samples / waves)
    deadline_s: float = 120.0  # reward.timeout_s
    steps: int = 6
    warmup_steps: int = 2
    seed: int = 1
    # A measured run to replay: per step, the seconds of some phases (keys as the fields above, e.g.
    # "generate_s"); a phase or step it lacks takes the constant above.
    trace: tuple[dict[str, float], ...] = ()
    replay_latencies: tuple[float, ...] = ()  # a measured run's reward latencies, in call order (then: drawn)

    @property
    def samples(self) -> int:
        return self.prompts_per_step * self.group_size

    @property
    def floor(self) -> float:
        """samples x E[min(latency, deadline)] / concurrency: the reward service's time per step."""
        return self.samples * self.latency.expected(self.deadline_s) / self.concurrency

    def compute(self, mode: dict[str, bool]) -> float:
        """Device seconds per step in `mode`: the old-logprob pass runs only in the synchronous form; the
        overlapped modes anchor on the behaviour logprobs, which generation returns."""
        anchored = mode["mini_batch_pipeline"] or mode["one_step_off_policy"]
        extra = self.behaviour_logprobs_s if anchored else self.old_logprobs_s
        return self.model_update_s + self.generate_s + self.train_s + extra

    def bound(self, mode: dict[str, bool]) -> float:
        return max(self.compute(mode), self.floor)

    def seconds(self, phase: str, step: int) -> float:
        """Simulated seconds of `phase` (model_update_s, generate_s, behaviour_logprobs_s, old_logprobs_s,
        train_s) at `step`."""
        if step < len(self.trace) and phase in self.trace[step]:
            return self.trace[step][phase]
        return getattr(self, phase)

    def with_seed(self, seed: int) -> "SimSpec":
        return replace(self, seed=seed)

    def config(self, mode: dict[str, bool]) -> Config:
        samples = self.samples
        reward = {"worker": f"{SimLatencyReward.__module__}.{SimLatencyReward.__name__}",
                  "max_concurrency": self.concurrency, "timeout_s": self.deadline_s,
                  "args": {"latency": self.latency.to_dict(), "seed": self.seed,
                           "replay": list(self.replay_latencies)}}
        tree = {
            "run": {"max_steps": self.steps, "eval_every": 0, "save_every": 0, "progress_bar": False,
                    "seed": self.seed, "name": "sim"},
            "trackers": {"wandb": False, "tensorboard": False, "jsonl": False},
            "data": {"train_files": ["(simulated)"]},
            "domains": {DOMAIN: {"reward": reward}},
            "rollout": {"prompts_per_step": self.prompts_per_step, "group_size": self.group_size},
            "generation": {"max_batch_size": max(1, samples // self.engine_batches),
                           "max_in_flight_per_worker": self.prompts_per_step},
            "actor_train": {"mini_batch_size": samples // self.mini_batches, "weight_sync_check_every": 0},
            "algorithm": {"preset": "grpo"},
            "overlap": dict(mode),
        }
        return config_from_dict(tree)


class SimDomainSchedulers(DomainSchedulers):
    """DomainSchedulers over local DynamicSamplingSchedulers on the simulation's loop: the driver's calls, deadlines
    and bookkeeping are the real ones; no Ray actor, so nothing is ever restarted."""

    def _start_actors(self, cfg: Config, data: dict, infer_workers: list, reward_workers: dict[str, list],
                      episodes: dict) -> dict:
        self.objects = {d: DynamicSamplingScheduler(d, data[d].train, data[d].val, infer_workers,
                                                    reward_workers.get(d, []), cfg, episodes=episodes.get(d))
                        for d in cfg.domains}
        return {d: self.waiter.runtime.actor(s) for d, s in self.objects.items()}

    def kill(self) -> None:
        pass  # SimRuntime.close() ends what is still running


class SimSystem:
    """No processes to sample."""

    def sample(self) -> dict[str, float]:
        return {}


class SimTrackers:
    """Keeps every step's metrics in memory (the simulator's metrics.jsonl)."""

    run_id = "sim"

    def __init__(self) -> None:
        self.records: list[dict[str, float]] = []

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.records.append({"step": step, **metrics})

    def close(self) -> None:
        pass


class SimPipeline(RLVRPipeline):
    """RLVRPipeline itself on parts that take simulated time: the start-up (Ray, model, data, judge server) is
    what the simulator replaces."""

    def __init__(self, spec: SimSpec, mode: dict[str, bool]):
        cfg = spec.config(mode)
        runtime = SimRuntime()
        # The driver's waits as in a real run (deadlines in simulated seconds); no supervisor ticks: nothing dies.
        waiter = Waiter.from_config(cfg.faults, runtime)
        faults = FaultLog(None)
        self.device = SimDevice(spec.seconds)
        engine = SimEngine(self.device, spec.samples, cfg.generation.max_batch_size)
        self.trainer = SimTrainWorker(self.device, spec.samples, cfg.actor_train.mini_batch_size)
        self.reward = RewardActor(DOMAIN, cfg.domains[DOMAIN].reward)
        # The driver's typed clusters over local objects on the simulation's loop (no Ray actors), waiting through
        # the driver's waiter, whose runtime is the simulation's.
        local = runtime.actor
        clusters = Clusters(
            actor_train=ActorTrainCluster("actor_train", [local(self.trainer)], waiter),
            actor_infer=ActorInferCluster(
                "actor_infer", [local(SimInferWorker(engine, cfg.generation.max_in_flight_per_worker))], waiter),
            reference=None,
            critic=None,
            rewards={DOMAIN: RewardCluster(f"reward/{DOMAIN}", [local(self.reward)], waiter)})
        prompts = [Prompt(uid=f"q{i}", domain=DOMAIN, ground_truth="", prompt_ids=[1, 2, 3, 4])
                   for i in range(spec.prompts_per_step * 4)]
        schedulers = SimDomainSchedulers(cfg, {DOMAIN: SimpleNamespace(train=prompts, val=[])},
                                         clusters.actor_infer.workers,
                                         {d: c.workers for d, c in clusters.rewards.items()}, waiter, faults)
        self.scheduler = schedulers.objects[DOMAIN]
        super().__init__(cfg, PipelineParts(run_dir=None, tokenizer=SimpleNamespace(pad_token_id=0), waiter=waiter,
                                            faults=faults, clusters=clusters, schedulers=schedulers, runtime=runtime,
                                            trackers=SimTrackers(), system=SimSystem()))

    def model_update(self) -> dict[str, float]:
        """The weight sync's duration on the device; the engine then stamps this step's version on samples."""
        self.waiter.get(self.clusters.actor_infer.load_weights_async(None, self.step), "actor_infer.load_weights")
        return {}

    def close(self) -> None:
        try:
            self.schedule.cancel_ahead()
        finally:
            self.runtime.close()


def simulate(spec: SimSpec, mode: dict[str, bool]) -> list[dict[str, float]]:
    """Every step's metrics, as RLVRPipeline logs them, with `sim/...` extras (device busy, reward calls)."""
    pipeline = SimPipeline(spec, mode)
    try:
        pipeline.run()
        records = pipeline.trackers.records
        if records:
            records[-1]["sim/reward_calls"] = float(pipeline.reward.worker.calls)
            records[-1]["sim/reward_slot_s"] = pipeline.reward.worker.slot_s
            records[-1]["sim/device_busy_s"] = pipeline.device.busy_s
            records[-1]["sim/trained_rows"] = float(pipeline.trainer.trained_rows)
            records[-1]["sim/end_s"] = pipeline.runtime.now()
        return records
    finally:
        pipeline.close()


def steady(records: list[dict[str, float]], spec: SimSpec, key: str, drop_last: bool = False) -> float:
    """Mean of `key` over the steps after the warm-up (as bench/async_reward.py reports). drop_last: without the
    run's last step, which (off-policy) has no next rollout to generate and so is shorter than a steady one."""
    last = spec.steps - 1 if drop_last else spec.steps
    values = [r[key] for r in records if spec.warmup_steps <= r["step"] < last and key in r]
    return sum(values) / len(values) if values else math.nan
