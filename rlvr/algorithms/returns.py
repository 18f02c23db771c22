"""Token-level rewards, discounted returns, GAE and masked whitening: the estimators that work per token.

Tensors are [B, T], target-aligned (rlvr/algorithms/advantages.py): column t is the action "emit the token at
position t+1", taken in state s_t (the context up to position t), and `values[:, t]` = V(s_t). `mask` is the loss
mask: 1 on the row's action tokens. Positions where the mask is 0 are not steps of the episode: before the
response (prompt), after it (padding), and in multi-turn rows the environment's observation tokens between two
actions. The recursions below skip them: a reward, value or TD error there is ignored, and the running return /
advantage is carried across them unchanged, so the step after an observation is "the next step" of the action
before it (verl's treatment of observation tokens). Every output is 0 where the mask is 0.
"""

from __future__ import annotations

import torch

__all__ = ["token_level_rewards", "discounted_returns", "gae_advantages", "masked_whiten"]


def token_level_rewards(scores: torch.Tensor, mask: torch.Tensor, kl: torch.Tensor | None = None,
                        kl_coef: float = 0.0) -> torch.Tensor:
    """r[b, t] = scores[b] on the row's last action token, minus kl_coef * kl[b, t] on every action token.

    A row with no action token (all-0 mask: failed reward, masked truncation) gets all 0; a NaN score there (the
    failed reward's placeholder) cannot leak.
    """
    if mask.dim() != 2 or scores.shape != (mask.shape[0],):
        raise ValueError(f"expected scores [B] and mask [B, T], got {tuple(scores.shape)}, {tuple(mask.shape)}")
    keep = mask.to(torch.bool)
    has_action = keep.any(dim=1)
    columns = torch.arange(mask.shape[1], device=mask.device)
    last = torch.where(keep, columns, torch.full_like(columns, -1)).amax(dim=1)
    rewards = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    rows = has_action.nonzero().squeeze(1)
    rewards[rows, last[rows]] = scores[rows].to(torch.float32)
    if kl is not None and kl_coef:
        rewards = rewards - kl_coef * torch.where(keep, kl.to(torch.float32), torch.zeros_like(rewards))
    return rewards


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = r_t + gamma * G_{t'} over the action steps (t' = the next action column of the row), 0 off the mask.

    With gamma = 1 and the score on the last token only, every action token's return is the sequence score (minus
    the KL still ahead of it, when the token rewards carry a KL penalty).
    """
    keep = mask.to(torch.bool)
    running = torch.zeros(rewards.shape[0], dtype=torch.float32, device=rewards.device)
    returns = torch.zeros(rewards.shape, dtype=torch.float32, device=rewards.device)
    for t in reversed(range(rewards.shape[1])):
        running = torch.where(keep[:, t], rewards[:, t] + gamma * running, running)
        returns[:, t] = torch.where(keep[:, t], running, torch.zeros_like(running))
    return returns


def gae_advantages(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
                   lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation (Schulman et al., arXiv 1506.02438) over the action steps:

        delta_t = r_t + gamma * V(s_{t'}) - V(s_t)          t' = the next action column; V = 0 past the last one
        A_t     = delta_t + gamma * lam * A_{t'}
        R_t     = A_t + V(s_t)                               the critic's regression target (the lambda-return)

    Not whitened (see `masked_whiten`). lam = 1: A_t = G_t - V(s_t) (Monte-Carlo); lam = 0: A_t = delta_t.

    Returns:
        (advantages, returns), each [B, T] float32, 0 where the mask is 0.
    """
    if not (rewards.shape == values.shape == mask.shape):
        raise ValueError(f"rewards, values and mask must share a shape, got {tuple(rewards.shape)}, "
                         f"{tuple(values.shape)}, {tuple(mask.shape)}")
    keep = mask.to(torch.bool)
    values = torch.where(keep, values.to(torch.float32), torch.zeros((), device=values.device))
    zeros = torch.zeros(rewards.shape[0], dtype=torch.float32, device=rewards.device)
    next_value, next_adv = zeros, zeros
    advantages = torch.zeros(rewards.shape, dtype=torch.float32, device=rewards.device)
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv = delta + gamma * lam * next_adv
        next_value = torch.where(keep[:, t], values[:, t], next_value)
        next_adv = torch.where(keep[:, t], adv, next_adv)
        advantages[:, t] = torch.where(keep[:, t], adv, zeros)
    returns = torch.where(keep, advantages + values, torch.zeros_like(advantages))
    return advantages, returns


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over the masked entries (unbiased variance, verl's `masked_whiten`), 0 off the
    mask. Fewer than 2 masked entries: the variance is undefined and the result is 0 (no signal to scale)."""
    keep = mask.to(torch.bool)
    n = keep.sum()
    zeros = torch.zeros_like(x, dtype=torch.float32)
    xf = torch.where(keep, x.to(torch.float32), zeros)
    mean = xf.sum() / n.clamp(min=1)
    centred = torch.where(keep, xf - mean, zeros)
    var = centred.pow(2).sum() / (n - 1).clamp(min=1)
    return torch.where(keep & (n >= 2), centred * torch.rsqrt(var + eps), zeros)
