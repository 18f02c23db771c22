"""Simulation fakes: the parts of a run whose *duration* is simulated, each behind the interface the real code
calls. Everything else in a simulated run is rlvr's own code (the driver loop, Rollout, the schedulers, the
reward actor and RewardWorker's limits, ActorInferWorker's admission control, batching and advantages).

- `SimDevice`: the accelerators that generation, weight sync and training share (colocated, as in the
  recipe): one job at a time, first come first served. It knows the driver's step, so that a phase may take
  that step's measured seconds (`durations`: phase -> seconds, for the step at hand).
- `SimEngine`: a generation engine (the Engine interface of rlvr/backends) that batches waiting requests as
  HFEngine does and holds the device for its share of the step's generation seconds, plus the behaviour-logprob
  pass's share when the samples carry their logprobs (the modes that anchor the ratio on them).
- `SimInferWorker`: the real ActorInferWorker (its admission control and weights gate) around a SimEngine.
- `SimTrainWorker`: actor_train's methods that the step calls (train, compute_logprobs, lr_step), each holding
  the device for its simulated duration.
- `SimLatencyReward`: a RewardWorker (so the base class's concurrency, deadline and metrics are the real ones)
  whose score() waits a latency drawn per sample and returns a coin-flip verdict. Latency and verdict are
  functions of (seed, sample), so every mode sees the same calls; or (`replay`) the k-th call waits the k-th
  latency a measured run's judge drew, plus the model's offset.
"""

from __future__ import annotations

import asyncio
import math
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from rlvr.data.batch import TrainBatch
from rlvr.data.reward_result import RewardResult
from rlvr.data.types import Generation
from rlvr.sim.latency import LatencyModel
from rlvr.workers.actor_infer import ActorInferWorker, Admission, WeightsGate
from rlvr.workers.rewards.base import RewardLimits, RewardWorker

GATHER_S = 0.005  # HFEngine waits this long so that requests arriving together share a batch


class SimDevice:
    def __init__(self, durations: Callable[[str, int], float]) -> None:
        self._lock = asyncio.Lock()
        self.busy_s = 0.0
        self.step = 0  # the driver's step: set at each weight sync
        self._durations = durations

    def seconds(self, phase: str) -> float:
        """The simulated seconds of `phase` (a whole step's worth) at the current step."""
        return self._durations(phase, self.step)

    async def run(self, seconds: float) -> None:
        async with self._lock:
            await asyncio.sleep(seconds)
            self.busy_s += seconds


@dataclass
class _Request:
    request_id: str | None
    n: int
    future: asyncio.Future
    logprobs: bool = False  # the sample carries its behaviour logprobs (HFEngine: one extra forward pass)


class SimEngine:
    def __init__(self, device: SimDevice, samples_per_step: int, max_batch_size: int, response_len: int = 4) -> None:
        self.device = device
        self.samples_per_step = samples_per_step  # a batch of k sequences takes k / samples of the step's generation
        self.max_batch_size = max_batch_size
        self.response_len = response_len
        self._pending: deque[_Request] = deque()
        self._runner: asyncio.Task | None = None
        self._version = 0
        self.stats = {"batches": 0, "sequences": 0}

    async def generate(self, prompt_ids: list[int], n: int, sampling, request_id: str | None = None
                       ) -> list[Generation]:
        loop = asyncio.get_running_loop()
        req = _Request(request_id, n, loop.create_future(), bool(getattr(sampling, "return_logprobs", False)))
        self._pending.append(req)
        if self._runner is None or self._runner.done():
            self._runner = loop.create_task(self._run())
        return await req.future

    def abort(self, request_ids: list[str]) -> None:
        """Waiting requests end at once with finish_reason 'abort' (a running batch finishes, as in HFEngine)."""
        ids = set(request_ids)
        for req in [r for r in self._pending if r.request_id in ids]:
            self._pending.remove(req)
            req.future.set_result([Generation([], "", "abort") for _ in range(req.n)])

    async def load_weights(self, named_tensors, version: int) -> None:
        self.device.step = version  # the driver syncs the weights once per step, stamped with the step
        await self.device.run(self.device.seconds("model_update_s"))
        self._version = version

    def policy_version(self) -> int:
        return self._version

    async def _run(self) -> None:
        await asyncio.sleep(GATHER_S)
        while self._pending:
            batch, size = [], 0
            while self._pending and (not batch or size + self._pending[0].n <= self.max_batch_size):
                batch.append(self._pending.popleft())
                size += batch[-1].n
            version = self._version  # a batch is generated by the weights loaded when it starts
            seconds = self.device.seconds("generate_s")
            if any(req.logprobs for req in batch):
                seconds += self.device.seconds("behaviour_logprobs_s")
            await self.device.run(seconds * size / self.samples_per_step)
            self.stats["batches"] += 1
            self.stats["sequences"] += size
            for req in batch:
                if not req.future.done():
                    req.future.set_result([self._response(version) for _ in range(req.n)])

    def _response(self, version: int) -> Generation:
        return Generation([7] * self.response_len, "simulated", "stop", logprobs=[-1.0] * self.response_len,
                          policy_version=version)


class SimInferWorker(ActorInferWorker):
    # Not super().__init__(): that builds a real engine from the config. Never restarted: its weights gate is open.
    def __init__(self, engine: SimEngine, max_in_flight: int) -> None:
        self.engine = engine
        self.admission = Admission(max_in_flight)
        self.restarted = False
        self.weights = WeightsGate(ready=True, timeout_s=math.inf)


class SimTrainWorker:
    def __init__(self, device: SimDevice, samples_per_step: int, mini_batch_size: int) -> None:
        self.device = device
        self.samples_per_step = samples_per_step
        self.mini_batch_size = mini_batch_size
        self.trained_rows = 0
        self.lr_steps = 0

    async def train(self, batch: TrainBatch, step_lr: bool = True) -> dict[str, float]:
        updates = math.ceil(len(batch) / self.mini_batch_size)
        await self.device.run(self.device.seconds("train_s") * updates * self.mini_batch_size / self.samples_per_step)
        self.trained_rows += len(batch)
        self.lr_steps += int(step_lr)
        return {"actor/updates": float(updates), "actor/pg_loss": 0.0}

    async def train_with_logprobs(self, batch: TrainBatch, step_lr: bool = True) -> tuple[dict[str, float],
                                                                                          torch.Tensor]:
        """The update's own logprobs come with it: no extra time."""
        return await self.train(batch, step_lr), torch.zeros_like(batch["loss_mask"])

    async def compute_logprobs(self, batch: TrainBatch) -> torch.Tensor:
        await self.device.run(self.device.seconds("old_logprobs_s") * len(batch) / self.samples_per_step)
        return torch.zeros_like(batch["loss_mask"])

    def lr_step(self) -> None:
        self.lr_steps += 1


class SimLatencyReward(RewardWorker):
    def __init__(self, domain: str, limits: RewardLimits | None = None, latency: dict | None = None,
                 seed: int = 0, replay: list[float] | None = None) -> None:
        super().__init__(domain, limits)
        self.latency = LatencyModel(**(latency or {"kind": "uniform", "low": 1.0, "high": 40.0}))
        self.seed = seed
        self.replay = list(replay or [])
        self.calls = 0
        self.slot_s = 0.0  # sum of min(latency, deadline): the slot-seconds the calls held

    async def score(self, sample) -> RewardResult:
        rng = np.random.default_rng([self.seed, zlib.crc32(sample.group_id.encode()), sample.index])
        if self.calls < len(self.replay):
            latency = self.replay[self.calls] + self.latency.offset_s
        else:
            latency = self.latency.draw(rng)
        self.calls += 1
        self.slot_s += min(latency, self.limits.timeout_s)
        await asyncio.sleep(latency)
        correct = bool(rng.random() < 0.5)
        return RewardResult(reward=float(correct), correct=correct)
