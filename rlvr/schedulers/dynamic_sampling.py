"""DynamicSamplingScheduler: one async Ray actor per domain.

It owns its domain's data cursor and, per prompt, runs: generate `group_size` responses on an actor_infer worker
(admission-capped), send each finished sample to the domain's reward cluster at once, and release the group only
when all its rewards are in. Groups come back in completion order.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np

from rlvr.backends.hf_engine import SamplingParams
from rlvr.config import Config
from rlvr.data.types import Group, Prompt, Sample
from rlvr.workers.rewards.result import STATUSES, RewardResult

log = logging.getLogger(__name__)


def sampling_from_config(cfg: Config, validation: bool = False) -> SamplingParams:
    gen = cfg.generation
    if not validation:
        return SamplingParams(gen.max_new_tokens, gen.temperature, gen.top_p, gen.top_k, gen.return_logprobs)
    val = cfg.validation
    return SamplingParams(val.max_new_tokens or gen.max_new_tokens, val.temperature, gen.top_p, gen.top_k, False)


def sample_metrics(prefix: str, samples: list[Sample]) -> dict[str, float]:
    """Reward, correctness, length and status counts of scored samples, under `prefix` (e.g. 'math/')."""
    statuses = Counter(s.reward.status if s.reward else "error" for s in samples)
    ok = [s for s in samples if s.scored_ok]
    out: dict[str, float] = {f"{prefix}reward/status/{st}": float(statuses.get(st, 0)) for st in STATUSES}
    lengths = [len(s.response_ids) for s in samples]
    if lengths:
        out[f"{prefix}response_length/mean"] = float(np.mean(lengths))
        out[f"{prefix}response_length/max"] = float(max(lengths))
        out[f"{prefix}response_length/clip_frac"] = sum(s.finish_reason == "length" for s in samples) / len(samples)
    if ok:
        out[f"{prefix}reward/mean"] = float(np.mean([s.reward.reward for s in ok]))
        judged = [s.reward.correct for s in ok if s.reward.correct is not None]
        if judged:
            out[f"{prefix}correct/mean"] = float(np.mean(judged))
    return out


class DynamicSamplingScheduler:
    def __init__(self, domain: str, train_prompts: list[Prompt], val_prompts: list[Prompt], infer_workers: list,
                 reward_workers: list, cfg: Config, rank: int = 0):
        self.domain = domain
        self.train_prompts = train_prompts
        self.val_prompts = val_prompts[: cfg.validation.max_prompts_per_domain]
        self.infer = infer_workers
        self.rewards = reward_workers
        self.group_size = cfg.rollout.group_size
        self.max_in_flight = cfg.rollout.max_in_flight_prompts
        self.sampling = sampling_from_config(cfg)
        self.val_sampling = sampling_from_config(cfg, validation=True)
        self.seed = cfg.run.seed
        self.epoch, self.pos = 0, 0
        self._order = self._permutation(0)
        self._rr_infer = self._rr_reward = 0
        self._admission: asyncio.Semaphore | None = None
        self.counters: Counter[str] = Counter()

    # ------------------------------------------------------------------ data cursor
    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.train_prompts))

    def _next_prompt(self) -> Prompt:
        if self.pos >= len(self._order):
            self.epoch, self.pos = self.epoch + 1, 0
            self._order = self._permutation(self.epoch)
        prompt = self.train_prompts[int(self._order[self.pos])]
        self.pos += 1
        return prompt

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "pos": self.pos, "counters": dict(self.counters)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.pos = state["epoch"], state["pos"]
        self._order = self._permutation(self.epoch)
        self.counters = Counter(state.get("counters", {}))

    # ------------------------------------------------------------------ one prompt
    async def _run_group(self, prompt: Prompt, n: int, sampling: SamplingParams, version: int, tag: str) -> Group:
        if self._admission is None:
            self._admission = asyncio.Semaphore(self.max_in_flight)
        group_id = f"{tag}:{prompt.uid}"
        async with self._admission:
            worker = self.infer[self._rr_infer % len(self.infer)]
            self._rr_infer += 1
            gens = await worker.generate.remote(prompt.prompt_ids, n, sampling, group_id)
        samples = [
            Sample(prompt=prompt, group_id=group_id, index=i, response_ids=g.token_ids, response_text=g.text,
                   finish_reason=g.finish_reason, policy_version=version, logprobs=g.logprobs)
            for i, g in enumerate(gens)
        ]
        results = await asyncio.gather(*(self._score(s) for s in samples))
        for s, r in zip(samples, results):
            s.reward = r
        return Group(group_id, prompt, samples)

    async def _score(self, sample: Sample) -> RewardResult:
        worker = self.rewards[self._rr_reward % len(self.rewards)]
        self._rr_reward += 1
        light = replace(sample, prompt=replace(sample.prompt, prompt_ids=[]))  # rewards never need the ids
        try:
            return await worker.score.remote(light)
        except Exception as err:  # the reward actor itself failed: count it, never lose the sample silently
            log.warning("reward actor failed for %s: %s", sample.group_id, err)
            return RewardResult.failed("error", f"reward actor failure: {type(err).__name__}: {err}")

    # ------------------------------------------------------------------ public
    async def get_batch(self, n_groups: int, step: int, version: int) -> tuple[list[Group], dict[str, float]]:
        """`n_groups` complete groups for this step, in completion order, with this domain's metrics."""
        prompts = [self._next_prompt() for _ in range(n_groups)]
        self.counters["prompts_started"] += n_groups
        tasks = [asyncio.create_task(self._run_group(p, self.group_size, self.sampling, version, f"s{step}"))
                 for p in prompts]
        groups = [await t for t in asyncio.as_completed(tasks)]
        self.counters["groups_kept"] += len(groups)
        d = f"{self.domain}/"
        metrics = sample_metrics(d, [s for g in groups for s in g.samples])
        metrics.update({f"{d}scheduler/{k}": float(v) for k, v in self.counters.items()})
        metrics[f"{d}scheduler/epoch"] = float(self.epoch)
        metrics.update(await self._reward_worker_metrics())
        return groups, metrics

    async def validate(self, version: int) -> tuple[dict[str, float], dict[str, int], list[dict]]:
        """One response per validation prompt. Returns (metrics, counts for the all-domain mean, examples)."""
        tasks = [self._run_group(p, 1, self.val_sampling, version, "val") for p in self.val_prompts]
        samples = [g.samples[0] for g in await asyncio.gather(*tasks)]
        scored = [s for s in samples if s.scored_ok and s.reward.correct is not None]
        n_correct = sum(bool(s.reward.correct) for s in scored)
        metrics = sample_metrics(f"val/{self.domain}/", samples)
        metrics.pop(f"val/{self.domain}/correct/mean", None)  # reported as val_correct/<domain>/mean instead
        if scored:
            metrics[f"val_correct/{self.domain}/mean"] = n_correct / len(scored)
        examples = [{"domain": self.domain, "prompt": s.prompt.uid, "response": s.response_text,
                     "ground_truth": str(s.prompt.ground_truth), "reward": s.reward.reward if s.reward else None,
                     "correct": s.reward.correct if s.reward else None, "status": s.reward.status if s.reward else None}
                    for s in samples]
        return metrics, {"correct": n_correct, "scored": len(scored), "total": len(samples)}, examples

    async def _reward_worker_metrics(self) -> dict[str, float]:
        per_worker = await asyncio.gather(*(w.metrics.remote() for w in self.rewards))
        out: dict[str, float] = {}
        for m in per_worker:
            for k, v in m.items():
                if k.startswith("status/"):
                    continue  # status counts come from this step's samples (sample_metrics), not the lifetime
                key = f"{self.domain}/reward/{k}"
                out[key] = max(out.get(key, 0.0), v) if ("max" in k or "peak" in k or "p9" in k) else out.get(key, 0.0) + v
        return out
