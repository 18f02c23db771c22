"""Outcome-reward advantage estimators for group-sampled RLVR.

Every estimator takes the rewards of a batch laid out by prompt group, `rewards` [G, n] (G prompts, n samples
each), and `valid` [G, n] (bool, False where the reward could not be computed: verifier crash, timeout, ...).
An invalid sample gets advantage 0, so it contributes no gradient, and it never enters a mean or a std: a
failed verifier says nothing about how good the response was, and letting a placeholder reward (0, NaN) into
the group statistics would bias every other sample of the group.

The result is one advantage per sequence, [G, n]; `broadcast_to_tokens` spreads it over the response tokens.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

__all__ = [
    "grpo_advantages",
    "rloo_advantages",
    "reinforce_pp_baseline_advantages",
    "broadcast_to_tokens",
    "ADVANTAGE_ESTIMATORS",
]


def _check_group_inputs(rewards: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Validate shapes and return `valid` as a bool tensor."""
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [G, n], got shape {tuple(rewards.shape)}")
    if valid.shape != rewards.shape:
        raise ValueError(f"valid must have the shape of rewards {tuple(rewards.shape)}, got {tuple(valid.shape)}")
    return valid.to(torch.bool)


def _group_stats(rewards: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-group count k, sum and mean of the valid rewards, each [G, 1].

    Invalid entries are replaced by 0 with `where` (not multiplied by the mask) so that a NaN placeholder
    reward cannot poison the sum (NaN * 0 is NaN).
    """
    r = torch.where(valid, rewards, torch.zeros_like(rewards))
    k = valid.sum(dim=1, keepdim=True).to(rewards.dtype)
    s = r.sum(dim=1, keepdim=True)
    mean = s / k.clamp(min=1)
    return k, s, mean


def grpo_advantages(
    rewards: torch.Tensor,
    valid: torch.Tensor,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO group-normalised advantage (DeepSeekMath, arXiv 2402.03300); Dr.GRPO when `norm_by_std=False`.

    For group g with valid set V_g, k = |V_g|:

        mean_g = (1/k) * sum_{j in V_g} r_j
        std_g  = sqrt( (1/(k-1)) * sum_{j in V_g} (r_j - mean_g)^2 )       (unbiased, as torch.std / verl / TRL)
        A_i    = (r_i - mean_g) / (std_g + eps)     if norm_by_std
        A_i    =  r_i - mean_g                       otherwise (Dr.GRPO, arXiv 2503.20783)

    A_i = 0 for invalid samples and for every sample of a group with k < 2: with one valid sample there is no
    baseline to compare against (and the unbiased std is undefined). A group whose rewards are all equal gets
    A = 0 (numerator is 0), so it adds no gradient, as in GRPO.

    Args:
        rewards: [G, n] float rewards.
        valid: [G, n] bool, False where the reward failed.
        norm_by_std: divide by the group std (GRPO) or not (Dr.GRPO, which removes the std's difficulty bias).
        eps: added to the std so that near-constant groups do not blow up.

    Returns:
        [G, n] advantages, same dtype as `rewards`.
    """
    valid = _check_group_inputs(rewards, valid)
    k, _, mean = _group_stats(rewards, valid)
    centered = torch.where(valid, rewards - mean, torch.zeros_like(rewards))
    if norm_by_std:
        # Bessel correction (k - 1), matching torch.std and the verl / TRL GRPO implementations.
        var = centered.pow(2).sum(dim=1, keepdim=True) / (k - 1).clamp(min=1)
        adv = centered / (var.sqrt() + eps)
    else:
        adv = centered
    keep = valid & (k >= 2)
    return torch.where(keep, adv, torch.zeros_like(adv))


def rloo_advantages(rewards: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """RLOO leave-one-out advantage (Ahmadian et al., arXiv 2402.14740).

    For group g with valid set V_g, k = |V_g| >= 2:

        A_i = r_i - (1/(k-1)) * sum_{j in V_g, j != i} r_j   =   (k/(k-1)) * (r_i - mean_g)

    The baseline excludes the sample itself, so it is independent of r_i and the estimate stays unbiased.
    A_i = 0 for invalid samples and for groups with fewer than 2 valid samples (no "other" sample to use).

    Returns:
        [G, n] advantages, same dtype as `rewards`.
    """
    valid = _check_group_inputs(rewards, valid)
    k, s, _ = _group_stats(rewards, valid)
    r = torch.where(valid, rewards, torch.zeros_like(rewards))
    baseline = (s - r) / (k - 1).clamp(min=1)
    adv = r - baseline
    keep = valid & (k >= 2)
    return torch.where(keep, adv, torch.zeros_like(adv))


def reinforce_pp_baseline_advantages(
    rewards: torch.Tensor,
    valid: torch.Tensor,
    eps: float = 1e-6,
) -> torch.Tensor:
    """REINFORCE++-baseline (Hu et al., arXiv 2501.03262): group-mean baseline, then batch-wide whitening.

        c_i = r_i - mean_g                                   (mean over the valid samples of i's group)
        A_i = (c_i - mean_B(c)) / (std_B(c) + eps)

    where mean_B and std_B (unbiased) run over every contributing sample of the whole batch: valid samples
    of groups with at least 2 valid samples. Normalising by the batch std rather than each group's std keeps
    the scale stable without GRPO's per-prompt difficulty re-weighting.

    A_i = 0 for invalid samples and for groups with fewer than 2 valid samples: such a sample's centred
    reward is 0 by construction, and whitening would turn that into a non-zero, meaningless signal; leaving
    it out of the batch statistics also keeps it from shrinking the std. If fewer than 2 samples contribute
    in the whole batch, every advantage is 0.

    This whitens per sequence; verl / OpenRLHF whiten over response tokens, which weights each sequence by
    its length. Per-sequence whitening keeps the estimator independent of the loss-aggregation choice.

    Returns:
        [G, n] advantages, same dtype as `rewards`.
    """
    valid = _check_group_inputs(rewards, valid)
    k, _, mean = _group_stats(rewards, valid)
    keep = valid & (k >= 2)
    zeros = torch.zeros_like(rewards)
    centered = torch.where(keep, rewards - mean, zeros)
    m = keep.sum().to(rewards.dtype)
    # Clamped divisors and a tensor condition instead of `if m < 2`: no host-device sync on GPU.
    batch_mean = centered.sum() / m.clamp(min=1)
    dev = torch.where(keep, centered - batch_mean, zeros)
    batch_std = (dev.pow(2).sum() / (m - 1).clamp(min=1)).sqrt()
    return torch.where(keep & (m >= 2), dev / (batch_std + eps), zeros)


def broadcast_to_tokens(seq_adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Spread one advantage per sequence over its response tokens: A[b, t] = seq_adv[b] * mask[b, t].

    Outcome rewards give every token of a response the same advantage; the mask zeroes prompt and padding
    positions so they carry no gradient whatever the loss does with them.

    Args:
        seq_adv: [B] sequence advantages (flatten a [G, n] result with `.reshape(-1)` first).
        mask: [B, T] bool or float, 1 on response tokens.

    Returns:
        [B, T] token advantages in `seq_adv`'s dtype.
    """
    if seq_adv.dim() != 1 or mask.dim() != 2 or mask.shape[0] != seq_adv.shape[0]:
        raise ValueError(
            f"expected seq_adv [B] and mask [B, T], got {tuple(seq_adv.shape)} and {tuple(mask.shape)}"
        )
    return seq_adv.unsqueeze(-1) * mask.to(seq_adv.dtype)


AdvantageFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# name -> f(rewards [G, n], valid [G, n]) -> advantages [G, n]; names match `adv_estimator` in presets.py.
ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {
    "grpo": grpo_advantages,
    "dr_grpo": functools.partial(grpo_advantages, norm_by_std=False),
    "rloo": rloo_advantages,
    "reinforce_pp_baseline": reinforce_pp_baseline_advantages,
}
