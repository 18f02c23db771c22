"""Per-domain reward post-processing before the advantage estimator, and advantage clipping after it (ROLL's
list: reward normalisation by group / batch / running moments, shift, scale, clip, advantage clip, plus a
per-domain weight). The order and the config keys are documented on RewardProcessingConfig (rlvr/config/algorithm.py):

    r1 = (r + reward_shift) * reward_scale
    r2 = (r1 - mean) / (std + eps)          mean per norm_mean_type (none: 0), std per norm_std_type (none: 1)
    r3 = clip(r2, -reward_clip, reward_clip)
    A  = reward_weight * clip(A_estimator, -advantage_clip, advantage_clip)

Only valid rewards (the verifier answered) enter any statistic; an invalid row keeps its NaN placeholder and is
never in the loss. Pure functions, except RunningMoments, whose state the driver checkpoints per domain.
"""

from __future__ import annotations

import math

import torch

__all__ = ["RunningMoments", "normalise", "process_rewards", "process_advantages"]

EPS = 1e-6


class RunningMoments:
    """Count, mean and sum of squared deviations of every reward seen so far (Chan et al.'s parallel update, so a
    batch at a time is exact, not an exponential average). `std` is the unbiased one; 1 until two values are in."""

    def __init__(self):
        self.count, self.mean, self.m2 = 0, 0.0, 0.0

    def update(self, x: torch.Tensor) -> None:
        x = x.double().flatten()
        n = x.numel()
        if n == 0:
            return
        batch_mean = float(x.mean())
        batch_m2 = float((x - batch_mean).pow(2).sum())
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean += delta * n / total
        self.m2 += batch_m2 + delta * delta * self.count * n / total
        self.count = total

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / (self.count - 1)) if self.count > 1 else 1.0

    def state_dict(self) -> dict[str, float]:
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.count, self.mean, self.m2 = int(state["count"]), float(state["mean"]), float(state["m2"])


def _group_stats(x: torch.Tensor, valid: torch.Tensor, group_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row mean and unbiased std of its group's valid values (std 0 for a group of fewer than 2)."""
    _, g = torch.unique(group_index, return_inverse=True)
    n_groups = int(g.max()) + 1 if g.numel() else 0
    xv = torch.where(valid, x, torch.zeros_like(x)).double()
    count = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, g, valid.double())
    total = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, g, xv)
    mean = total / count.clamp(min=1)
    dev = torch.where(valid, xv - mean[g], torch.zeros_like(xv))
    var = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, g, dev.pow(2)) / (count - 1).clamp(min=1)
    return mean[g].to(x.dtype), var.sqrt()[g].to(x.dtype)


def normalise(x: torch.Tensor, valid: torch.Tensor, group_index: torch.Tensor, mean_type: str, std_type: str,
              running: RunningMoments | None) -> torch.Tensor:
    """(x - mean) / (std + eps) with each statistic taken as its type says: none (0 / 1), group (the row's prompt
    group), batch (every valid row), running (every valid reward so far, this batch included: `running` must
    already have been updated with it)."""
    def stat(kind: str, which: int) -> torch.Tensor:
        if kind == "none":
            return torch.full_like(x, 0.0 if which == 0 else 1.0)
        if kind == "group":
            return _group_stats(x, valid, group_index)[which]
        if kind == "batch":
            xs = x[valid].double()
            value = (xs.mean() if len(xs) else 0.0) if which == 0 else (xs.std() if len(xs) > 1 else 0.0)
            return torch.full_like(x, float(value))
        if kind == "running":
            if running is None:
                raise ValueError("running normalisation needs the domain's RunningMoments")
            return torch.full_like(x, running.mean if which == 0 else running.std)
        raise ValueError(f"unknown normalisation {kind!r}; valid: none, group, batch, running")

    mean, std = stat(mean_type, 0), stat(std_type, 1)
    if std_type == "none":
        return torch.where(valid, x - mean, x)
    return torch.where(valid, (x - mean) / (std + EPS), x)


def process_rewards(scores: torch.Tensor, valid: torch.Tensor, group_index: torch.Tensor, cfg,
                    running: RunningMoments | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Shift, scale, normalise and clip one domain's rewards (cfg: RewardProcessingConfig). Updates `running` with
    this batch's shifted and scaled valid rewards when a running normalisation is configured. Returns the
    processed rewards and metrics (clip fraction; the running moments)."""
    valid = valid.to(torch.bool)
    x = torch.where(valid, (scores.to(torch.float32) + cfg.reward_shift) * cfg.reward_scale, scores.to(torch.float32))
    metrics: dict[str, float] = {}
    if "running" in (cfg.norm_mean_type, cfg.norm_std_type):
        running.update(x[valid])
        metrics.update({"reward/running_mean": running.mean, "reward/running_std": running.std})
    x = normalise(x, valid, group_index, cfg.norm_mean_type, cfg.norm_std_type, running)
    if cfg.reward_clip is not None:
        clipped = valid & (x.abs() > cfg.reward_clip)
        metrics["reward/clip_frac"] = float(clipped.sum() / valid.sum().clamp(min=1))
        x = torch.where(valid, x.clamp(-cfg.reward_clip, cfg.reward_clip), x)
    return x, metrics


def process_advantages(advantages: torch.Tensor, mask: torch.Tensor, cfg) -> tuple[torch.Tensor, dict[str, float]]:
    """reward_weight * clip(A, -advantage_clip, advantage_clip) (cfg: RewardProcessingConfig); the clip fraction is
    over the loss tokens."""
    metrics: dict[str, float] = {}
    if cfg.advantage_clip is not None:
        keep = mask.to(torch.bool)
        clipped = keep & (advantages.abs() > cfg.advantage_clip)
        metrics["advantage/clip_frac"] = float(clipped.sum() / keep.sum().clamp(min=1))
        advantages = advantages.clamp(-cfg.advantage_clip, cfg.advantage_clip)
    if cfg.reward_weight != 1.0:
        advantages = advantages * cfg.reward_weight
    return advantages, metrics
