"""The critic's objective: PPO's clipped value loss, and the explained variance of its predictions.

Token-level tensors are [B, T], target-aligned like the actor's (rlvr/algorithms/advantages.py); `mask` is the
loss mask. Pure functions; the critic worker calls `value_objective` once per micro-batch with the global token /
sequence counts of the mini-batch, so the summed micro-batch gradients are the full mini-batch's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.algorithms.policy_loss import _masked_mean, aggregate_loss

__all__ = ["clipped_value_loss", "explained_variance", "ValueSettings", "value_objective"]


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
                       cliprange: float | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token clipped value loss (PPO; verl / TRL's form):

        v_clip = old + clamp(v - old, -c, c)
        L      = 0.5 * max( (v - R)^2, (v_clip - R)^2 )

    The max is pessimistic, as in the policy loss: the clip removes the incentive to move a value more than c
    away from the value the advantages were computed with, never adds one. cliprange None: L = 0.5 (v - R)^2.

    Returns:
        per-token loss [B, T] (0 where mask is 0), and stats over the masked tokens: clipfrac (fraction where the
        clipped term is the larger one, i.e. the clip is active), vpred_mean.
    """
    if not (values.shape == old_values.shape == returns.shape == mask.shape):
        raise ValueError(f"values, old_values, returns and mask must share a shape, got {tuple(values.shape)}, "
                         f"{tuple(old_values.shape)}, {tuple(returns.shape)}, {tuple(mask.shape)}")
    keep = mask.to(torch.bool)
    # off the mask every input is replaced before any arithmetic: a NaN there would otherwise come back through
    # the gradient (NaN * 0 = NaN)
    values, old_values, returns = (torch.where(keep, t, torch.zeros_like(t)) for t in (values, old_values, returns))
    unclipped = (values - returns).pow(2)
    if cliprange is None:
        loss, clipped_active = unclipped, torch.zeros_like(unclipped, dtype=torch.bool)
    else:
        if cliprange <= 0:
            raise ValueError(f"cliprange must be > 0, got {cliprange}")
        clipped = (old_values + torch.clamp(values - old_values, -cliprange, cliprange) - returns).pow(2)
        loss, clipped_active = torch.maximum(unclipped, clipped), clipped > unclipped
    loss = torch.where(keep, 0.5 * loss, torch.zeros_like(loss))
    with torch.no_grad():
        stats = {"clipfrac": _masked_mean(clipped_active.to(values.dtype), mask),
                 "vpred_mean": _masked_mean(values.detach(), mask)}
    return loss, stats


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var(R - V) / Var(R) over the masked tokens (population variances): 1 for a perfect critic, 0 for one
    that predicts the mean, negative for a worse one. NaN when the returns do not vary (undefined)."""
    keep = mask.to(torch.bool)
    r, v = returns[keep].double(), values[keep].double()
    if r.numel() == 0:
        return float("nan")
    var_r = r.var(unbiased=False)
    if var_r == 0:
        return float("nan")
    return float(1.0 - (r - v).var(unbiased=False) / var_r)


@dataclass(frozen=True)
class ValueSettings:
    cliprange_value: float | None = 0.5
    loss_agg_mode: str = "token-mean"


def value_objective(values: torch.Tensor, tensors: dict[str, torch.Tensor], settings: ValueSettings,
                    n_tokens: torch.Tensor, n_seqs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The critic's loss for one micro-batch: `tensors` holds loss_mask, values (the old values the advantages
    were computed with) and returns. Stats are this micro-batch's share of the mini-batch mean (weighted by its
    tokens), so summing them over the micro-batches gives the mini-batch value."""
    mask = tensors["loss_mask"]
    per_token, stats = clipped_value_loss(values, tensors["values"], tensors["returns"], mask,
                                          settings.cliprange_value)
    loss = aggregate_loss(per_token, mask, settings.loss_agg_mode, n_tokens_global=n_tokens, n_seqs_global=n_seqs)
    share = mask.sum() / n_tokens
    return loss, {"value_loss": loss.detach(), **{k: v.detach() * share for k, v in stats.items()}}
