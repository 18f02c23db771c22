"""KL to the reference in the reward: the per-token penalty and the controller of its coefficient.

Independent of the KL *loss* (actor_objective's kl_loss_coef): here the KL is part of the token rewards that the
advantage estimator sees (r_t = score * [t last] - coef * KL_t, rlvr/algorithms/returns.py::token_level_rewards),
as in InstructGPT-style PPO and REINFORCE++. The controllers follow Ziegler et al. (arXiv 1909.08593, sec. 2.2) and
verl's `AdaptiveKLController` / `FixedKLController`; their state (the coefficient) is checkpointed by the driver.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.kl import kl_penalty

__all__ = ["FixedKLController", "AdaptiveKLController", "make_kl_controller", "reward_kl"]


class FixedKLController:
    def __init__(self, kl_coef: float):
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """A fixed coefficient does not move."""

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


class AdaptiveKLController(FixedKLController):
    """Ziegler et al.'s proportional controller, towards a target KL per sequence-mean token:

        e     = clip(KL / target - 1, -0.2, 0.2)
        coef *= 1 + e * n_steps / horizon

    n_steps = the number of sequences the KL was measured on (verl passes the batch size): the coefficient moves
    by about 20% per `horizon` sequences at most, up when the policy drifts past the target, down below it."""

    def __init__(self, kl_coef: float, target_kl: float, horizon: int):
        super().__init__(kl_coef)
        if target_kl <= 0 or horizon <= 0:
            raise ValueError(f"target_kl and horizon must be > 0, got {target_kl}, {horizon}")
        self.target, self.horizon = float(target_kl), int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


def make_kl_controller(cfg) -> FixedKLController:
    """From a KLControlConfig (rlvr/config/algorithm.py)."""
    if cfg.type == "adaptive":
        return AdaptiveKLController(cfg.kl_coef, cfg.target_kl, cfg.horizon)
    return FixedKLController(cfg.kl_coef)


def reward_kl(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor,
              kind: str) -> tuple[torch.Tensor, float]:
    """Per-token KL estimate of the sampled tokens (0 off the mask) and the batch's KL: the mean over the rows that
    have loss tokens of each row's mean KL per token (verl's `current_kl`, what the adaptive controller tracks).

    `logp` are the logprobs of the policy that generated (or is anchored to) the samples: the old-policy
    logprobs, not the ones being trained: the penalty is part of the reward, fixed before the update."""
    keep = mask.to(torch.bool)
    kl = torch.where(keep, kl_penalty(logp.float(), ref_logp.float(), kind), torch.zeros((), dtype=torch.float32))
    tokens = keep.sum(dim=1)
    rows = tokens > 0
    per_row = kl.sum(dim=1)[rows] / tokens[rows]
    return kl, float(per_row.mean()) if rows.any() else 0.0
