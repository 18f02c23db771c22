"""GiGPO (Group-in-Group Policy Optimization, Feng et al., arXiv 2505.10978) and its multi-step GRPO baseline:
per-turn advantages for multi-turn agent episodes, as pure functions of tensors.

Layout: B trajectories (one row each), up to K agent turns each.

    scores       [B]     episode return (the sequence reward), used by the episode level
    valid        [B]     False for a masked episode (env error / timeout / garbage): no advantage, in no group
    group_index  [B]     task group of each trajectory (same task and seed: the same initial state)
    turn_rewards [B, K]  env reward after the action of turn k
    state_ids    [B, K]  anchor state (interned `Env.state_key`) the action of turn k was taken in
    turn_valid   [B, K]  True on the turns the trajectory took (a prefix of the K columns)

GiGPO (paper eqs. 3-8):

    A^E_i     = (R_i - mean_{task group}(R)) / F                   episode level, F = std or 1
    R_{i,t}   = sum_{k >= t} gamma^(k - t) r_{i,k}                 discounted return of step t
    A^S_{i,t} = (R_{i,t} - mean_{anchor group}(R)) / F             anchor group: every step of the same task
                                                                   group whose state key is identical
    A_{i,t}   = A^E_i + omega * A^S_{i,t}

An anchor group of one step has no peer to compare with: A^S = 0 there (as is a task group with fewer than two
valid episodes: A^E = 0), matching GRPO's treatment of single-sample groups in rlvr/algorithms/advantages.py.
`multi_step_grpo` is the baseline the paper compares against: A^E broadcast to every turn.

Normalisation: "mean_norm" subtracts the group mean (F = 1, the paper's and verl-agent's default for agent
benchmarks), "mean_std_norm" also divides by the unbiased group std + eps (GRPO's). The episode level follows
`norm_by_std`, the step level `step_norm`. The episode mean runs over trajectories (paper eq. 3); verl-agent's
default averages over step rows instead, which weights long episodes more.

Learned from verl-agent (langfengQ/verl-agent, gigpo/core_gigpo.py: anchor grouping by exact observation match
within the episode group, discounted step returns, singleton groups contributing zero) and Trinity-RFT's GiGPO
advantage function (A = A_E + omega * A_S broadcast over the action mask). The code here is our own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

StepNorm = Literal["mean_norm", "mean_std_norm"]
STEP_NORMS: tuple[str, ...] = ("mean_norm", "mean_std_norm")

__all__ = ["EpisodeTurns", "discounted_returns", "group_normalize", "anchor_groups", "gigpo_turn_advantages",
           "step_advantages", "multi_step_grpo_turn_advantages", "spread_turn_values", "intern_state_keys",
           "anchor_stats", "turns_from_tokens"]


@dataclass
class EpisodeTurns:
    scores: torch.Tensor  # [B] float
    valid: torch.Tensor  # [B] bool
    group_index: torch.Tensor  # [B] long
    turn_rewards: torch.Tensor  # [B, K] float
    state_ids: torch.Tensor  # [B, K] long
    turn_valid: torch.Tensor  # [B, K] bool

    def __post_init__(self) -> None:
        b = self.scores.shape[0]
        for name in ("valid", "group_index"):
            if getattr(self, name).shape != (b,):
                raise ValueError(f"{name} must be [B]={b}, got {tuple(getattr(self, name).shape)}")
        k = self.turn_rewards.shape
        if len(k) != 2 or k[0] != b:
            raise ValueError(f"turn_rewards must be [B, K] with B={b}, got {tuple(k)}")
        for name in ("state_ids", "turn_valid"):
            if getattr(self, name).shape != k:
                raise ValueError(f"{name} must have the shape of turn_rewards {tuple(k)}, got "
                                 f"{tuple(getattr(self, name).shape)}")

    @property
    def steps(self) -> torch.Tensor:
        """[B, K] bool: the turns that count (taken, in a valid episode)."""
        return self.turn_valid.bool() & self.valid.bool()[:, None]


def discounted_returns(turn_rewards: torch.Tensor, turn_valid: torch.Tensor, gamma: float) -> torch.Tensor:
    """R_t = r_t + gamma * R_{t+1} along each row, over the valid turns (0 elsewhere)."""
    r = torch.where(turn_valid.bool(), turn_rewards, torch.zeros_like(turn_rewards))
    out = torch.zeros_like(r)
    running = torch.zeros_like(r[:, 0])
    for t in range(r.shape[1] - 1, -1, -1):  # rewards past a row's last turn are 0: nothing leaks back
        running = r[:, t] + gamma * running
        out[:, t] = running
    return torch.where(turn_valid.bool(), out, torch.zeros_like(out))


def group_normalize(values: torch.Tensor, member: torch.Tensor, groups: torch.Tensor, by_std: bool,
                    eps: float = 1e-6) -> torch.Tensor:
    """Each member value minus its group's mean (divided by the group's unbiased std + eps when `by_std`);
    0 for non-members and for members of groups with fewer than 2 members. 1-D tensors of one length;
    `groups` holds any integer ids (only members' ids matter)."""
    member = member.bool()
    out = torch.zeros_like(values)
    if not bool(member.any()):
        return out
    ids, inverse = torch.unique(groups[member], return_inverse=True)
    v = values[member]
    count = torch.zeros(len(ids), dtype=values.dtype).index_add_(0, inverse, torch.ones_like(v))
    mean = torch.zeros(len(ids), dtype=values.dtype).index_add_(0, inverse, v) / count
    centred = v - mean[inverse]
    if by_std:
        var = torch.zeros(len(ids), dtype=values.dtype).index_add_(0, inverse, centred.pow(2))
        std = (var / (count - 1).clamp(min=1)).sqrt()
        centred = centred / (std[inverse] + eps)
    out[member] = torch.where(count[inverse] >= 2, centred, torch.zeros_like(centred))
    return out


def anchor_groups(group_index: torch.Tensor, state_ids: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """[B, K] long: one id per (task group, state) pair among the counted steps, -1 elsewhere."""
    pairs = torch.stack([group_index[:, None].expand_as(state_ids), state_ids], dim=-1)[steps.bool()]
    out = torch.full(state_ids.shape, -1, dtype=torch.long)
    if len(pairs):
        _, inverse = torch.unique(pairs, dim=0, return_inverse=True)
        out[steps.bool()] = inverse
    return out


def episode_advantages(ep: EpisodeTurns, norm_by_std: bool, eps: float = 1e-6) -> torch.Tensor:
    """[B] A^E: each valid episode's return against the other valid episodes of its task group."""
    return group_normalize(ep.scores.to(torch.float32), ep.valid, ep.group_index, norm_by_std, eps)


def multi_step_grpo_turn_advantages(ep: EpisodeTurns, norm_by_std: bool = False,
                                    eps: float = 1e-6) -> torch.Tensor:
    """[B, K]: the episode advantage A^E on every turn the trajectory took (0 on the others)."""
    a_e = episode_advantages(ep, norm_by_std, eps)
    return torch.where(ep.steps, a_e[:, None].expand_as(ep.turn_rewards), torch.zeros_like(ep.turn_rewards))


def gigpo_turn_advantages(ep: EpisodeTurns, gamma: float = 0.95, omega: float = 1.0,
                          step_norm: StepNorm = "mean_norm", norm_by_std: bool = False,
                          eps: float = 1e-6) -> tuple[torch.Tensor, dict[str, float]]:
    """[B, K] A^E + omega * A^S per turn (0 on turns not taken and on masked episodes), and statistics of the
    step level (`anchor_stats` plus the mean |A^S| over counted steps)."""
    a_s, stats = step_advantages(ep, gamma, step_norm, eps)
    return multi_step_grpo_turn_advantages(ep, norm_by_std, eps) + omega * a_s, stats


def step_advantages(ep: EpisodeTurns, gamma: float = 0.95, step_norm: StepNorm = "mean_norm",
                    eps: float = 1e-6) -> tuple[torch.Tensor, dict[str, float]]:
    """[B, K] A^S, GiGPO's step level alone, and its statistics (`anchor_stats` + mean |A^S| over counted steps)."""
    if step_norm not in STEP_NORMS:
        raise ValueError(f"step_norm must be one of {STEP_NORMS}, got {step_norm!r}")
    steps = ep.steps
    returns = discounted_returns(ep.turn_rewards.to(torch.float32), steps, gamma)
    anchors = anchor_groups(ep.group_index, ep.state_ids, steps)
    a_s = group_normalize(returns.reshape(-1), steps.reshape(-1), anchors.reshape(-1),
                          step_norm == "mean_std_norm", eps).reshape(returns.shape)
    stats = anchor_stats(anchors)
    stats["step_adv_abs_mean"] = float(a_s[steps].abs().mean()) if bool(steps.any()) else 0.0
    return a_s, stats


def anchor_stats(anchors: torch.Tensor) -> dict[str, float]:
    """Share of counted steps that sit in an anchor group of size >= 2, and the mean anchor-group size."""
    ids = anchors[anchors >= 0]
    if not len(ids):
        return {"anchor_steps_grouped_frac": 0.0, "anchor_group_size_mean": 0.0, "anchor_groups": 0.0}
    _, counts = torch.unique(ids, return_counts=True)
    grouped = counts[counts >= 2].sum()
    return {"anchor_steps_grouped_frac": float(grouped) / len(ids),
            "anchor_group_size_mean": float(counts.float().mean()), "anchor_groups": float(len(counts))}


def spread_turn_values(per_turn: torch.Tensor, turn_index: torch.Tensor) -> torch.Tensor:
    """Token tensor [B, T] with per_turn[b, turn_index[b, t]] where turn_index >= 0, 0 elsewhere (observation,
    prompt and padding positions carry -1). Turn indices past per_turn's K columns are an error."""
    if per_turn.dim() != 2 or turn_index.dim() != 2 or per_turn.shape[0] != turn_index.shape[0]:
        raise ValueError(f"expected per_turn [B, K] and turn_index [B, T], got {tuple(per_turn.shape)} and "
                         f"{tuple(turn_index.shape)}")
    if turn_index.numel() and int(turn_index.max()) >= per_turn.shape[1]:
        raise ValueError(f"turn_index {int(turn_index.max())} out of range for {per_turn.shape[1]} turns")
    action = turn_index >= 0
    if per_turn.shape[1] == 0:
        return torch.zeros(turn_index.shape, dtype=per_turn.dtype)
    values = per_turn.gather(1, turn_index.clamp(min=0))
    return torch.where(action, values, torch.zeros_like(values))


def intern_state_keys(keys: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-trajectory lists of state keys -> (state_ids [B, K] long, turn_valid [B, K] bool), K the longest list.
    Equal strings get equal ids across the whole batch (grouping is still per task group)."""
    table: dict[str, int] = {}
    width = max((len(k) for k in keys), default=0)
    ids = torch.full((len(keys), width), -1, dtype=torch.long)
    valid = torch.zeros((len(keys), width), dtype=torch.bool)
    for b, row in enumerate(keys):
        for t, key in enumerate(row):
            ids[b, t] = table.setdefault(key, len(table))
            valid[b, t] = True
    return ids, valid


def turns_from_tokens(scores: torch.Tensor, valid: torch.Tensor, group_index: torch.Tensor,
                      turn_index: torch.Tensor, turn_reward: torch.Tensor,
                      state_id: torch.Tensor) -> EpisodeTurns | None:
    """EpisodeTurns from the batch's token-aligned multi-turn tensors (rlvr/data/turns.py): per row, turn k's
    state is the state id on its tokens, its reward the sum of turn_reward over them (one non-zero entry). None
    when no row holds an episode (a single-turn domain). A valid row without turns is masked here."""
    if not bool((state_id >= 0).any()):
        return None
    b = turn_index.shape[0]
    k = int(turn_index.max()) + 1
    rewards = torch.zeros((b, k), dtype=torch.float32)
    states = torch.full((b, k), -1, dtype=torch.long)
    rows, cols = ((turn_index >= 0) & (state_id >= 0)).nonzero(as_tuple=True)
    turns = turn_index[rows, cols]
    states[rows, turns] = state_id[rows, cols]
    rewards.index_put_((rows, turns), turn_reward[rows, cols].to(torch.float32), accumulate=True)
    turn_valid = states >= 0
    return EpisodeTurns(scores=torch.nan_to_num(scores.to(torch.float32)), valid=valid.bool() & turn_valid.any(1),
                        group_index=group_index, turn_rewards=rewards, state_ids=states, turn_valid=turn_valid)
