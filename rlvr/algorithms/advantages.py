"""Advantage estimators, and the token-level advantage contract every estimator follows.

The contract (shared by every estimator, the critic, and multi-turn / GiGPO work)
--------------------------------------------------------------------------------
* Where: the driver (rlvr/pipeline/rlvr_pipeline.py, `RLVRPipeline.train_on`) builds the batch (ids, masks,
  behaviour logprobs, scores, group index: rlvr/pipeline/batching.py::make_train_batch), then runs the forward
  passes the step needs (reference logprobs, old-policy logprobs, critic values; concurrently), and only then
  computes advantages, one domain at a time (rlvr/pipeline/advantage_step.py::AdvantageStep), before the critic
  and actor updates. Advantages can therefore use values, reference logprobs and token-level KL.
* Input: one domain's rows as an `AdvantageInputs` (tensors, B rows, T target-aligned columns):
      scores        [B]     float  the sequence reward after reward processing (NaN or anything where not valid)
      valid         [B]     bool   the reward was computed (False: verifier crash / timeout -> no signal)
      group_index   [B]     long   prompt group of each row (any integers; equal = same prompt)
      loss_mask     [B, T]  float  1 on response tokens that train (target-aligned like TrainBatch["loss_mask"]);
                                   a valid row may have an all-0 mask (e.g. rollout.mask_truncated)
      values        [B, T]  float  critic values V(s_t) at the same columns (optional; GAE)
      token_rewards [B, T]  float  per-token rewards: the score on the row's last loss token plus any per-token
                                   KL penalty (optional; GAE, REINFORCE / REINFORCE++)
      turn_index    [B, T]  long   which agent turn an action token belongs to, -1 elsewhere (multi-turn only)
      episode       dict           per-row episode data for estimators that need more (GiGPO anchor states, ...)
  "Target-aligned" (rlvr/data/batch.py): column t concerns the token at input position t+1, i.e. it holds that
  token's logprob, advantage and mask, and the value of the state *before* it (the hidden state at position t).
* Output: `(advantages [B, T], returns [B, T] | None)`, float32, zero wherever loss_mask is 0
  (`compute_advantages` enforces this). Sequence-level estimators broadcast one number per row over its loss
  tokens; GAE fills per token; GiGPO fills per agent turn. `returns` are the critic's regression targets when
  the estimator defines them.
* In the batch: `TrainBatch["advantages"]` and (when given) `TrainBatch["returns"]` hold the result, [B, T-1]
  like `loss_mask`; every loss, aggregation mode and off-policy correction downstream reads only these.
* Registry: `ADVANTAGE_ESTIMATORS[name](inputs, settings) -> (advantages, returns | None)`, keyed by
  `algorithm.adv_estimator`; `AdvantageSettings` carries the estimator knobs from the config. Adding an
  estimator = a pure function here (or in its own module) plus one registry entry and its config literal.

Group estimators
----------------
The outcome-reward estimators below take the rewards of a batch laid out by prompt group, `rewards` [G, n]
(G prompts, n samples each), and `valid` [G, n]; `grouped` adapts them to the contract (ragged groups are padded
with invalid entries). An invalid sample gets advantage 0, so it contributes no gradient, and it never enters a
mean or a std: a failed verifier says nothing about how good the response was, and letting a placeholder reward
(0, NaN) into the group statistics would bias every other sample of the group.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from rlvr.algorithms.returns import discounted_returns, gae_advantages, masked_whiten, token_level_rewards
from rlvr.algorithms.gigpo import (EpisodeTurns, gigpo_turn_advantages, multi_step_grpo_turn_advantages,
                                   spread_turn_values, turns_from_tokens)

__all__ = [
    "AdvantageInputs",
    "AdvantageSettings",
    "ADVANTAGE_ESTIMATORS",
    "GROUP_ESTIMATORS",
    "compute_advantages",
    "grouped",
    "grpo_advantages",
    "rloo_advantages",
    "reinforce_pp_baseline_advantages",
    "reinforce_advantages",
    "reinforce_pp_advantages",
    "gae",
    "broadcast_to_tokens",
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


GroupFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# name -> f(rewards [G, n], valid [G, n]) -> advantages [G, n]: the group kernels.
GROUP_ESTIMATORS: dict[str, GroupFn] = {
    "grpo": grpo_advantages,
    "dr_grpo": functools.partial(grpo_advantages, norm_by_std=False),
    "rloo": rloo_advantages,
    "reinforce_pp_baseline": reinforce_pp_baseline_advantages,
}


# ---------------------------------------------------------------------------------------------- the contract
@dataclass
class AdvantageInputs:
    """One domain's rows; see the module docstring for shapes and alignment."""

    scores: torch.Tensor
    valid: torch.Tensor
    group_index: torch.Tensor
    loss_mask: torch.Tensor
    values: torch.Tensor | None = None
    token_rewards: torch.Tensor | None = None
    turn_index: torch.Tensor | None = None
    episode: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        b = self.scores.shape[0]
        if self.scores.dim() != 1 or self.valid.shape != (b,) or self.group_index.shape != (b,):
            raise ValueError(f"scores, valid and group_index must be [B], got {tuple(self.scores.shape)}, "
                             f"{tuple(self.valid.shape)}, {tuple(self.group_index.shape)}")
        if self.loss_mask.dim() != 2 or self.loss_mask.shape[0] != b:
            raise ValueError(f"loss_mask must be [B={b}, T], got {tuple(self.loss_mask.shape)}")
        for name in ("values", "token_rewards", "turn_index"):
            t = getattr(self, name)
            if t is not None and t.shape != self.loss_mask.shape:
                raise ValueError(f"{name} must have loss_mask's shape {tuple(self.loss_mask.shape)}, "
                                 f"got {tuple(t.shape)}")


@dataclass(frozen=True)
class AdvantageSettings:
    """Estimator knobs, from `algorithm.*` (rlvr/pipeline/advantage_step.py::advantage_settings)."""

    norm_by_std: bool = True  # grpo: divide by the group std (False: Dr.GRPO); GiGPO's episode level too
    gamma: float = 1.0  # discount over action tokens (reinforce, reinforce_pp, gae)
    lam: float = 0.95  # GAE's lambda
    eps: float = 1e-6
    gigpo_gamma: float = 0.95  # GiGPO's step level (rlvr/algorithms/gigpo.py)
    gigpo_omega: float = 1.0
    gigpo_step_norm: str = "mean_norm"


Estimator = Callable[[AdvantageInputs, AdvantageSettings], tuple[torch.Tensor, "torch.Tensor | None"]]


def _group_layout(group_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """(group g of each row, position of each row inside its group, G, largest group size n)."""
    _, inverse = torch.unique(group_index, return_inverse=True)
    n_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    counts = torch.bincount(inverse, minlength=n_groups)
    order = torch.argsort(inverse, stable=True)
    starts = torch.cumsum(counts, 0) - counts
    position = torch.empty_like(inverse)
    position[order] = torch.arange(len(inverse)) - starts[inverse[order]]
    return inverse, position, n_groups, int(counts.max()) if n_groups else 0


def sequence_rewards(inp: AdvantageInputs) -> torch.Tensor:
    """One reward per row for the sequence-level estimators: the score, or, when token rewards are given (a KL
    penalty in the reward), their sum over the row (score - coef * sum_t KL_t, as verl's GRPO sums its
    token_level_rewards); a row without loss tokens keeps its score (it has no KL to pay)."""
    if inp.token_rewards is None:
        return inp.scores.to(torch.float32)
    has_tokens = inp.loss_mask.to(torch.bool).any(dim=1)
    return torch.where(has_tokens, inp.token_rewards.sum(dim=1).to(torch.float32), inp.scores.to(torch.float32))


def grouped(kernel: GroupFn) -> Estimator:
    """A group kernel ([G, n] rewards) as a contract estimator: rows are laid out by `group_index` (groups may
    differ in size: the padding is invalid, so it enters no statistic), and each row's sequence advantage is
    broadcast over its loss tokens."""

    def estimate(inp: AdvantageInputs, settings: AdvantageSettings) -> tuple[torch.Tensor, None]:
        g, pos, n_groups, n = _group_layout(inp.group_index)
        rewards = torch.zeros((n_groups, n), dtype=torch.float32)
        valid = torch.zeros((n_groups, n), dtype=torch.bool)
        rewards[g, pos] = sequence_rewards(inp)
        valid[g, pos] = inp.valid.to(torch.bool)
        seq_adv = kernel(rewards, valid)[g, pos]
        return broadcast_to_tokens(seq_adv, inp.loss_mask), None

    return estimate


def _grpo(inp: AdvantageInputs, settings: AdvantageSettings) -> tuple[torch.Tensor, None]:
    kernel = functools.partial(grpo_advantages, norm_by_std=settings.norm_by_std, eps=settings.eps)
    return grouped(kernel)(inp, settings)


# ---------------------------------------------------------------------------------------------- token-level
def _token_rewards(inp: AdvantageInputs) -> torch.Tensor:
    """The inputs' token rewards, or (none given) the score on each row's last loss token."""
    if inp.token_rewards is not None:
        return inp.token_rewards.to(torch.float32)
    return token_level_rewards(inp.scores, inp.loss_mask)


def reinforce_advantages(inp: AdvantageInputs, settings: AdvantageSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain REINFORCE (Williams 1992) with a batch baseline:

        G_t = sum_{s >= t} gamma^(s-t) r_s         (token rewards: the score at the end, any KL penalty on the way)
        b   = mean over the rows with loss tokens of G at the row's first loss token (its whole return)
        A_t = G_t - b

    The baseline is one number for the batch (no groups needed, unlike RLOO/GRPO), so it also serves batches of
    one sample per prompt. Returns G (the critic-free "returns")."""
    mask = inp.loss_mask
    returns = discounted_returns(_token_rewards(inp), mask, settings.gamma)
    keep = mask.to(torch.bool)
    rows = keep.any(dim=1)
    first = torch.where(keep, torch.arange(mask.shape[1]), torch.full((mask.shape[1],), mask.shape[1])).amin(dim=1)
    seq_returns = returns[rows.nonzero().squeeze(1), first[rows]]
    baseline = seq_returns.mean() if len(seq_returns) else torch.zeros(())
    return torch.where(keep, returns - baseline, torch.zeros_like(returns)), returns


def reinforce_pp_advantages(inp: AdvantageInputs, settings: AdvantageSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (Hu et al., arXiv 2501.03262): discounted token returns G_t (the KL penalty is in the token
    rewards when algorithm.use_kl_in_reward is on, as the paper prescribes), whitened over every loss token of the
    batch (the domain's rows): A = (G - mean) / std. No critic and no groups: the global statistics replace
    both; a long response weighs in with each of its tokens (as in verl / OpenRLHF)."""
    returns = discounted_returns(_token_rewards(inp), inp.loss_mask, settings.gamma)
    return masked_whiten(returns, inp.loss_mask), returns


def gae(inp: AdvantageInputs, settings: AdvantageSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's estimator: GAE over the critic's values (rlvr/algorithms/returns.py::gae_advantages), advantages
    whitened over every loss token of the batch (verl / ROLL / OpenRLHF do the same); the returns (A + V, before
    whitening) are the critic's targets."""
    if inp.values is None:
        raise ValueError("adv_estimator 'gae' needs the critic's values (AdvantageInputs.values)")
    advantages, returns = gae_advantages(_token_rewards(inp), inp.values, inp.loss_mask, settings.gamma,
                                         settings.lam)
    return masked_whiten(advantages, inp.loss_mask), returns


def episode_turns(inp: AdvantageInputs) -> EpisodeTurns | None:
    """A domain's multi-turn episodes from the inputs (turn_index + episode["turn_reward", "state_id"]); None for
    a single-turn domain."""
    if inp.turn_index is None or "state_id" not in inp.episode:
        return None
    return turns_from_tokens(inp.scores, inp.valid, inp.group_index, inp.turn_index, inp.episode["turn_reward"],
                             inp.episode["state_id"])


def _per_turn(name: str) -> Estimator:
    """GiGPO / multi-step GRPO: per-turn advantages on each turn's tokens; a single-turn domain (nothing to assign
    between turns) gets the episode level alone, i.e. GRPO."""

    def estimate(inp: AdvantageInputs, settings: AdvantageSettings) -> tuple[torch.Tensor, None]:
        ep = episode_turns(inp)
        if ep is None:
            return _grpo(inp, settings)
        if name == "gigpo":
            per_turn, _ = gigpo_turn_advantages(ep, settings.gigpo_gamma, settings.gigpo_omega,
                                                settings.gigpo_step_norm, settings.norm_by_std, settings.eps)
        else:
            per_turn = multi_step_grpo_turn_advantages(ep, settings.norm_by_std, settings.eps)
        return spread_turn_values(per_turn, inp.turn_index) * inp.loss_mask, None

    return estimate


# name -> estimator over AdvantageInputs; names match the `algorithm.adv_estimator` literals in config.py.
ADVANTAGE_ESTIMATORS: dict[str, Estimator] = {
    "grpo": _grpo,
    "dr_grpo": grouped(GROUP_ESTIMATORS["dr_grpo"]),
    "rloo": grouped(rloo_advantages),
    "reinforce_pp_baseline": grouped(reinforce_pp_baseline_advantages),
    "reinforce": reinforce_advantages,
    "reinforce_pp": reinforce_pp_advantages,
    "gae": gae,
    "gigpo": _per_turn("gigpo"),
    "multi_step_grpo": _per_turn("multi_step_grpo"),
}


def compute_advantages(name: str, inp: AdvantageInputs,
                       settings: AdvantageSettings = AdvantageSettings()) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Runs estimator `name` and enforces the output contract: float32 [B, T] tensors, 0 where loss_mask is 0
    (with `where`, so a NaN outside the mask cannot survive)."""
    if name not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}; known: {', '.join(sorted(ADVANTAGE_ESTIMATORS))}")
    advantages, returns = ADVANTAGE_ESTIMATORS[name](inp, settings)
    keep = inp.loss_mask.to(torch.bool)
    out = []
    for t in (advantages, returns):
        if t is None:
            out.append(None)
            continue
        if t.shape != inp.loss_mask.shape:
            raise ValueError(f"estimator {name!r} returned shape {tuple(t.shape)}, expected "
                             f"{tuple(inp.loss_mask.shape)}")
        out.append(torch.where(keep, t.to(torch.float32), torch.zeros((), dtype=torch.float32)))
    return out[0], out[1]
