"""Per-request sampling seeds: a request's samples depend on its id and the run's seed, not on which other
requests shared its batch, in which order requests arrived, or how many were generated before it.

Both engines derive a request's seed the same way, `request_seed(engine seed, request id)`, and sample i of the
request uses seed + i (vLLM's own convention for n > 1). vLLM takes the seed per request. For HF `generate`,
which samples every row from one global generator, `seeded_sampling_processors` turns sampling into greedy
decoding over Gumbel-perturbed scores: argmax(log p + G) with G ~ Gumbel(0, 1) is an exact sample from p
(the Gumbel-max trick), and each row draws its G from its own generator, one draw per position.
"""

from __future__ import annotations

import hashlib

import torch
from transformers.generation.logits_process import (LogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper,
                                                    TopPLogitsWarper)

SEED_RANGE = 2**31 - 2**16  # vLLM seeds sample i of n with seed + i: room for n below 2**31


def request_seed(engine_seed: int, key: str) -> int:
    """A seed for the request `key` (its id), stable across runs and processes (not Python's salted hash)."""
    digest = hashlib.blake2b(f"{engine_seed}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % SEED_RANGE


class GumbelNoise(LogitsProcessor):
    """Adds row r's own Gumbel(0, 1) noise to its scores; greedy decoding then samples. Draw t of a row's
    generator goes to its t-th generated token whatever the batch around it."""

    def __init__(self, seeds: list[int]):
        self.generators = [torch.Generator().manual_seed(seed) for seed in seeds]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        uniform = torch.stack([torch.rand(scores.shape[-1], generator=g) for g in self.generators])
        tiny = torch.finfo(torch.float32).tiny
        gumbel = -torch.log(-torch.log(uniform.clamp_(min=tiny)))  # uniform < 1: -log(u) > 0, finite
        return scores.float() + gumbel.to(scores.device)


def seeded_sampling_processors(temperature: float, top_k: int, top_p: float, seeds: list[int]) -> list:
    """Temperature, top-k and top-p as HF applies them when sampling, then the per-row noise."""
    processors: list[LogitsProcessor] = [TemperatureLogitsWarper(temperature)]
    if top_k:
        processors.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        processors.append(TopPLogitsWarper(top_p))
    processors.append(GumbelNoise(seeds))
    return processors
