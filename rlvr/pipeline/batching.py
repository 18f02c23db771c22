"""Groups of scored samples -> one TrainBatch with per-domain advantages."""

from __future__ import annotations

import functools

import numpy as np
import torch

from rlvr.algorithms.advantages import ADVANTAGE_ESTIMATORS, grpo_advantages
from rlvr.config import AlgorithmConfig
from rlvr.data.batch import TrainBatch, build_train_batch, in_loss
from rlvr.data.types import Group, Sample
from rlvr.pipeline.turn_advantages import turn_advantages, with_turn_advantages


def group_rewards(groups: list[Group]) -> tuple[torch.Tensor, torch.Tensor]:
    """rewards [G, n] (NaN where failed) and valid [G, n]."""
    rewards = torch.tensor([[s.reward.reward if s.scored_ok else float("nan") for s in g.samples] for g in groups],
                           dtype=torch.float32)
    valid = torch.tensor([[s.scored_ok for s in g.samples] for g in groups], dtype=torch.bool)
    return rewards, valid


def estimator(cfg: AlgorithmConfig):
    if cfg.adv_estimator in ("grpo", "gigpo", "multi_step_grpo"):  # GiGPO's episode level is GRPO's
        return functools.partial(grpo_advantages, norm_by_std=cfg.norm_adv_by_std)
    return ADVANTAGE_ESTIMATORS[cfg.adv_estimator]


def make_train_batch(groups_by_domain: dict[str, list[Group]], cfg: AlgorithmConfig, pad_id: int, seed: int,
                     mask_truncated: bool = False) -> tuple[TrainBatch, list[Sample], dict[str, float]]:
    """Advantages are computed per domain (each domain's groups only), then every sample becomes a row.

    Rows are shuffled with a seeded generator so that mini-batches mix domains; groups need no contiguity once
    their advantages are computed.
    """
    samples: list[Sample] = []
    advantages: list[torch.Tensor] = []
    per_turn: list[torch.Tensor | None] = []  # env domains under gigpo / multi_step_grpo: advantages per turn
    metrics: dict[str, float] = {}
    for domain, groups in groups_by_domain.items():
        if not groups:
            continue
        rewards, valid = group_rewards(groups)
        adv = estimator(cfg)(rewards, valid)
        samples.extend(s for g in groups for s in g.samples)
        advantages.append(adv.reshape(-1))
        turn_rows, turn_metrics = turn_advantages(groups, cfg)
        per_turn.extend(turn_rows)
        metrics.update({f"{domain}/{k}": v for k, v in turn_metrics.items()})
        ok = adv[valid]
        metrics[f"{domain}/advantage/abs_mean"] = float(ok.abs().mean()) if ok.numel() else 0.0
        spread = (rewards.nan_to_num(0).amax(1) > rewards.nan_to_num(0).amin(1)) & valid.all(1)
        metrics[f"{domain}/groups/with_signal_frac"] = float(spread.float().mean())
    order = torch.from_numpy(np.random.default_rng(seed).permutation(len(samples)))
    samples = [samples[i] for i in order]
    batch = build_train_batch(samples, torch.cat(advantages)[order], pad_id, mask_truncated)
    batch = with_turn_advantages(batch, [per_turn[i] for i in order])
    masked = sum(not in_loss(s, mask_truncated) for s in samples)
    sizes = {len(g.samples) for gs in groups_by_domain.values() for g in gs}
    metrics.update({"batch/groups": float(sum(len(gs) for gs in groups_by_domain.values())),
                    "batch/group_size/min": float(min(sizes)), "batch/group_size/max": float(max(sizes)),
                    "batch/samples": float(len(samples)), "batch/masked_samples": float(masked),
                    "batch/masked_truncated": float(sum(s.scored_ok and not in_loss(s, mask_truncated)
                                                        for s in samples)),
                    "batch/response_tokens": float(batch["loss_mask"].sum())})
    return batch, samples, metrics
