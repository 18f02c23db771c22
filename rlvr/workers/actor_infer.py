"""actor_infer worker (async Ray actor): a generation engine behind the engine interface."""

from __future__ import annotations

import os

import torch

from rlvr.backends.hf_engine import HFEngine, SamplingParams
from rlvr.config import Config
from rlvr.data.types import Generation


class ActorInferWorker:
    def __init__(self, cfg: Config, model_path: str, rank: int = 0):
        gen = cfg.generation
        torch.set_num_threads(gen.torch_threads or os.cpu_count() or 1)  # see TorchStrategy: Ray sets 1
        self.engine = HFEngine(model_path, dtype=gen.dtype, max_batch_size=gen.max_batch_size,
                               seed=cfg.run.seed + 1000 + rank)

    async def generate(self, prompt_ids: list[int], n: int, sampling: SamplingParams,
                       request_id: str | None = None) -> list[Generation]:
        return await self.engine.generate(prompt_ids, n, sampling, request_id)

    async def abort(self, request_ids: list[str]) -> None:
        self.engine.abort(request_ids)

    async def load_weights(self, named_tensors: dict[str, torch.Tensor], version: int) -> None:
        await self.engine.load_weights(named_tensors, version)

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
