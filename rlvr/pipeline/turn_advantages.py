"""Per-turn advantages of env domains (GiGPO, multi-step GRPO) onto the training batch's action tokens.

The glue between the episodes in Samples and the pure functions of rlvr/algorithms/gigpo.py. Sequence-level
estimators need nothing from here: build_train_batch already spreads them over the policy's tokens only.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.gigpo import (EpisodeTurns, anchor_groups, anchor_stats, gigpo_turn_advantages,
                                   intern_state_keys, multi_step_grpo_turn_advantages, spread_turn_values)
from rlvr.config import AlgorithmConfig
from rlvr.data.batch import TrainBatch
from rlvr.data.types import Group

TURN_ESTIMATORS = ("gigpo", "multi_step_grpo")


def episode_turns(groups: list[Group]) -> EpisodeTurns:
    """One row per sample, in group order; a sample without an episode is a masked row with no turns."""
    samples = [s for g in groups for s in g.samples]
    state_ids, turn_valid = intern_state_keys([s.episode.state_keys if s.episode else [] for s in samples])
    rewards = torch.zeros(state_ids.shape, dtype=torch.float32)
    for b, s in enumerate(samples):
        if s.episode is not None and s.episode.rewards:
            rewards[b, : len(s.episode.rewards)] = torch.tensor(s.episode.rewards, dtype=torch.float32)
    return EpisodeTurns(
        scores=torch.tensor([s.reward.reward if s.scored_ok else 0.0 for s in samples], dtype=torch.float32),
        valid=torch.tensor([s.scored_ok and s.episode is not None for s in samples], dtype=torch.bool),
        group_index=torch.tensor([g for g, group in enumerate(groups) for _ in group.samples], dtype=torch.long),
        turn_rewards=rewards, state_ids=state_ids, turn_valid=turn_valid)


def turn_advantages(groups: list[Group], cfg: AlgorithmConfig) -> tuple[list[torch.Tensor | None], dict[str, float]]:
    """Per sample: its per-turn advantages [K] (None when the estimator is sequence-level or the domain is not
    an env domain), and the domain's anchor-group statistics (unprefixed, under gigpo/)."""
    samples = [s for g in groups for s in g.samples]
    if not any(s.episode is not None for s in samples):
        return [None] * len(samples), {}
    ep = episode_turns(groups)
    if cfg.adv_estimator == "gigpo":
        g = cfg.gigpo
        per_turn, stats = gigpo_turn_advantages(ep, g.gamma, g.omega, g.step_norm, cfg.norm_adv_by_std)
    else:  # anchor statistics are worth watching whatever the estimator
        per_turn = (multi_step_grpo_turn_advantages(ep, cfg.norm_adv_by_std)
                    if cfg.adv_estimator == "multi_step_grpo" else None)
        stats = anchor_stats(anchor_groups(ep.group_index, ep.state_ids, ep.steps))
    rows = [None] * len(samples) if per_turn is None else list(per_turn)
    return rows, {f"gigpo/{k}": v for k, v in stats.items()}


def with_turn_advantages(batch: TrainBatch, rows: list[torch.Tensor | None]) -> TrainBatch:
    """Rows with per-turn advantages get them on their action tokens (turn_index), masked by loss_mask; the
    other rows keep theirs."""
    todo = [b for b, r in enumerate(rows) if r is not None]
    if not todo:
        return batch
    width = max(len(rows[b]) for b in todo)
    per_turn = torch.zeros((len(todo), width), dtype=torch.float32)
    for i, b in enumerate(todo):
        per_turn[i, : len(rows[b])] = rows[b]
    index = torch.tensor(todo)
    advantages = batch["advantages"].clone()
    advantages[index] = spread_turn_values(per_turn, batch["turn_index"][index]) * batch["loss_mask"][index]
    return batch.with_tensor("advantages", advantages)
