"""actor_infer worker (async Ray actor): a generation engine behind the engine interface, with admission control.

Admission is per inference worker and shared by every domain's scheduler: at most `max_in_flight_per_worker`
requests are inside the engine at once, the rest wait here (and can be aborted while waiting).

A worker that Ray restarted after a crash comes back with the initial weights: it serves nothing until the
driver's supervisor has pushed the current ones (`health()` says `needs_weights`), so no sample is ever generated
by a policy the trainer has left behind.
"""

from __future__ import annotations

import asyncio
import os
from collections import OrderedDict
from typing import TYPE_CHECKING

from rlvr.config.root import Config
from rlvr.data.types import Generation, SamplingParams
from rlvr.runtime.waiter import was_restarted

if TYPE_CHECKING:
    import torch

# torch and the engines are imported where the engine is built, not here: Ray imports the module of an actor's class
# in every process that receives a handle to it (the schedulers, the router), and this module's handles go to all of
# them, which then each paid torch's and transformers' import (~3.4 s of CPU, ~0.5 GB) for nothing.


def build_engine(cfg: Config, model_path: str, seed: int):
    """The engine that `generation.engine` names: HFEngine or VLLMEngine (same interface)."""
    import torch

    gen = cfg.generation
    threads = gen.torch_threads or os.cpu_count() or 1
    torch.set_num_threads(threads)  # see TorchStrategy: Ray sets 1
    if gen.engine == "hf":
        from rlvr.backends.hf_engine import HFEngine

        return HFEngine(model_path, dtype=gen.dtype, max_batch_size=gen.max_batch_size, seed=seed)
    from rlvr.backends.vllm_engine import VLLMEngine

    v = gen.vllm
    longest = max(gen.max_new_tokens, cfg.validation.max_new_tokens or 0)
    episodes = [dc.env.max_total_tokens + 1 for dc in cfg.domains.values() if dc.env is not None]  # whole episodes
    return VLLMEngine(model_path, dtype=gen.dtype, max_batch_size=gen.max_batch_size, seed=seed,
                      max_model_len=v.max_model_len or max([cfg.data.max_prompt_length + longest + 1, *episodes]),
                      kv_cache_gib=v.kv_cache_gib, gpu_memory_utilization=v.gpu_memory_utilization,
                      enforce_eager=v.enforce_eager, omp_threads=threads,
                      enable_prefix_caching=v.enable_prefix_caching, tensor_parallel_size=gen.tensor_parallel_size)


class ActorInferWorker:
    def __init__(self, cfg: Config, model_path: str, rank: int = 0):
        # One seed for every rank: a request's samples follow from its id (per-request seeds), not from the worker
        # that happened to serve it.
        self.engine = build_engine(cfg, model_path, seed=cfg.run.seed + 1000)
        self.admission = Admission(cfg.generation.max_in_flight_per_worker)
        self.restarted = was_restarted()
        self.weights = WeightsGate(ready=not self.restarted, timeout_s=cfg.faults.restart_timeout_s)

    async def generate(self, prompt_ids: list[int], n: int, sampling: SamplingParams,
                       request_id: str | None = None) -> list[Generation]:
        await self.weights.wait()
        if not await self.admission.acquire(request_id):  # aborted while waiting for admission
            return [Generation([], "", "abort") for _ in range(n)]
        try:
            return await self.engine.generate(prompt_ids, n, sampling, request_id)
        finally:
            self.admission.release()

    async def abort(self, request_ids: list[str]) -> None:
        self.admission.abort(request_ids)
        self.engine.abort(request_ids)

    async def admission_stats(self) -> dict[str, float]:
        return {"in_flight": self.admission.in_flight, "in_flight_peak": self.admission.peak,
                "waiting": len(self.admission.waiting)}

    async def load_weights(self, named_tensors: dict[str, torch.Tensor], version: int) -> None:
        """Versions only move forward: a late push of older weights (a restart racing a sync) is ignored."""
        if self.weights.ready and version < self.engine.policy_version():
            return
        await self.engine.load_weights(named_tensors, version)
        self.weights.loaded()

    async def health(self) -> dict[str, object]:
        """For the driver's supervisor and for tests that inject faults: this process, and whether it was
        restarted and still waits for the current weights."""
        return {"pid": os.getpid(), "restarted": self.restarted, "needs_weights": not self.weights.ready,
                "version": self.engine.policy_version(), "in_flight": self.admission.in_flight}

    async def join_weight_group(self, address: tuple[str, int], rank_offset: int, world_size: int, backend: str,
                                timeout_s: float) -> None:
        await self.engine.join_weight_group(address, rank_offset, world_size, backend, timeout_s)

    async def receive_weights(self, version: int) -> None:
        """A collective sync (rlvr/pipeline/weight_sync.py): every member receives, also one that has newer weights
        already (the sender waits for all); a restarted worker serves again once they are in."""
        await self.engine.receive_weights(version)
        self.weights.loaded()

    async def policy_version(self) -> int:
        return self.engine.policy_version()

    async def sequence_logprobs(self, sequences: list[list[int]]) -> list[list[float]]:
        return await self.engine.compute_logprobs(sequences)

    async def stats(self) -> dict[str, float]:
        return dict(self.engine.stats)

    async def rng_state(self) -> torch.Tensor:
        return self.engine.rng_state()

    async def set_rng_state(self, state: torch.Tensor) -> None:
        self.engine.set_rng_state(state)

    async def close(self) -> None:
        """Stops the engine's own processes (vLLM) before the actor is killed."""
        shutdown = getattr(self.engine, "shutdown", None)
        if shutdown is not None:
            shutdown()


class WeightsGate:
    """Holds requests back until the worker has weights to serve them with (after a restart)."""

    def __init__(self, ready: bool, timeout_s: float):
        self.ready = ready
        self.timeout_s = timeout_s
        self._event: asyncio.Event | None = None  # made on the actor's event loop, at first use

    async def wait(self) -> None:
        if self.ready:
            return
        try:
            await asyncio.wait_for(self._get_event().wait(), self.timeout_s)
        except asyncio.TimeoutError:
            raise TimeoutError(f"restarted actor_infer worker got no weights within {self.timeout_s:g}s "
                               "(faults.restart_timeout_s)") from None

    def loaded(self) -> None:
        self.ready = True
        if self._event is not None:
            self._event.set()

    def _get_event(self) -> asyncio.Event:
        if self._event is None:
            self._event = asyncio.Event()
        return self._event


class Admission:
    """A cap on requests inside the engine: FIFO waiters, abort while waiting, and a peak for metrics and tests."""

    def __init__(self, cap: int):
        self.cap = cap
        self.in_flight = 0
        self.peak = 0
        self.waiting: OrderedDict[str, asyncio.Future] = OrderedDict()
        self._anon = 0

    async def acquire(self, request_id: str | None) -> bool:
        """True once admitted; False if aborted while waiting."""
        if self.in_flight < self.cap and not self.waiting:
            self._admit()
            return True
        if request_id is None:
            self._anon += 1
            request_id = f"anon-{self._anon}"
        future = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = future
        try:
            return await future
        except asyncio.CancelledError:
            self.waiting.pop(request_id, None)
            if future.done() and not future.cancelled() and future.result():
                self.release()  # admitted just as the caller went away: give the slot back
            raise

    def release(self) -> None:
        self.in_flight -= 1
        while self.waiting and self.in_flight < self.cap:
            _, future = self.waiting.popitem(last=False)
            if not future.done():
                self._admit()
                future.set_result(True)

    def abort(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            future = self.waiting.pop(request_id, None)
            if future is not None and not future.done():
                future.set_result(False)

    def _admit(self) -> None:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
