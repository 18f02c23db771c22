"""Groups of scored samples -> one TrainBatch; per-domain advantages on it once its forward passes are done."""

from __future__ import annotations

import numpy as np
import torch

from rlvr.algorithms.advantages import AdvantageInputs, AdvantageSettings, compute_advantages, episode_turns
from rlvr.algorithms.gigpo import step_advantages
from rlvr.config import AlgorithmConfig
from rlvr.data.batch import TrainBatch, build_train_batch, in_loss
from rlvr.data.types import Group, Sample


def make_train_batch(groups_by_domain: dict[str, list[Group]], domains: list[str], pad_id: int, seed: int,
                     mask_truncated: bool = False) -> tuple[TrainBatch, list[Sample], dict[str, float]]:
    """Every sample becomes a row (scores, valid, group and domain index included; no advantages yet).

    Rows are shuffled with a seeded generator so that mini-batches mix domains; groups need no contiguity (the
    estimators find them by `group_index`).
    """
    samples = [s for gs in groups_by_domain.values() for g in gs for s in g.samples]
    metrics: dict[str, float] = {}
    for domain, groups in groups_by_domain.items():
        if groups:
            metrics[f"{domain}/groups/with_signal_frac"] = sum(map(_has_signal, groups)) / len(groups)
    order = np.random.default_rng(seed).permutation(len(samples))
    samples = [samples[i] for i in order]
    batch = build_train_batch(samples, pad_id, mask_truncated, domains)
    masked = sum(not in_loss(s, mask_truncated) for s in samples)
    sizes = {len(g.samples) for gs in groups_by_domain.values() for g in gs}
    metrics.update({"batch/groups": float(sum(len(gs) for gs in groups_by_domain.values())),
                    "batch/group_size/min": float(min(sizes)), "batch/group_size/max": float(max(sizes)),
                    "batch/samples": float(len(samples)), "batch/masked_samples": float(masked),
                    "batch/masked_truncated": float(sum(s.scored_ok and not in_loss(s, mask_truncated)
                                                        for s in samples)),
                    "batch/response_tokens": float(batch["loss_mask"].sum())})
    return batch, samples, metrics


def _has_signal(group: Group) -> bool:
    """Every reward in and not all equal: the group can move the policy."""
    if not all(s.scored_ok for s in group.samples):
        return False
    return len({s.reward.reward for s in group.samples}) > 1


def advantage_settings(cfg: AlgorithmConfig) -> AdvantageSettings:
    g = cfg.gigpo
    return AdvantageSettings(norm_by_std=cfg.norm_adv_by_std, gigpo_gamma=g.gamma, gigpo_omega=g.omega,
                             gigpo_step_norm=g.step_norm)


def domain_inputs(batch: TrainBatch, rows: torch.Tensor) -> AdvantageInputs:
    """The contract's inputs for a subset of rows (one domain's)."""
    def optional(key: str) -> torch.Tensor | None:
        t = batch.get(key)
        return None if t is None else t[rows]

    return AdvantageInputs(scores=batch["scores"][rows], valid=batch["valid"][rows],
                           group_index=batch["group_index"][rows], loss_mask=batch["loss_mask"][rows],
                           values=optional("values"), token_rewards=optional("token_rewards"),
                           turn_index=optional("turn_index"),
                           episode={k: batch[k][rows] for k in ("turn_reward", "state_id") if k in batch.tensors})


def domain_advantages(batch: TrainBatch, domains: list[str],
                      cfg: AlgorithmConfig) -> tuple[TrainBatch, dict[str, float]]:
    """Advantages (and returns, when the estimator gives them) computed per domain, over that domain's rows only,
    written into `advantages` / `returns` [B, T-1]."""
    mask = batch["loss_mask"]
    advantages = torch.zeros_like(mask)
    returns: torch.Tensor | None = None
    metrics: dict[str, float] = {}
    settings = advantage_settings(cfg)
    for i, domain in enumerate(domains):
        rows = (batch["domain_index"] == i).nonzero().squeeze(1)
        if not len(rows):
            continue
        inputs = domain_inputs(batch, rows)
        adv, ret = compute_advantages(cfg.adv_estimator, inputs, settings)
        metrics.update(anchor_metrics(domain, inputs, settings))
        advantages[rows] = adv
        if ret is not None:
            returns = torch.zeros_like(mask) if returns is None else returns
            returns[rows] = ret
        tokens = mask[rows].sum()
        metrics[f"{domain}/advantage/abs_mean"] = float(adv.abs().sum() / tokens) if tokens else 0.0
    batch = batch.with_tensor("advantages", advantages)
    return (batch if returns is None else batch.with_tensor("returns", returns)), metrics


def anchor_metrics(domain: str, inputs: AdvantageInputs, settings: AdvantageSettings) -> dict[str, float]:
    """An env domain's anchor-state groups (GiGPO's step level) in this batch, whatever the estimator."""
    ep = episode_turns(inputs)
    if ep is None:
        return {}
    _, stats = step_advantages(ep, settings.gigpo_gamma, settings.gigpo_step_norm, settings.eps)
    return {f"{domain}/gigpo/{k}": v for k, v in stats.items()}
