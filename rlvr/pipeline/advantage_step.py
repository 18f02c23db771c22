"""The driver's advantage phase: after the batch's forward passes, before the updates (the contract is in
rlvr/algorithms/advantages.py). For one batch:

    KL in the reward (when on): per-token KL of the samples vs the reference, its coefficient from the controller
    per domain:  reward processing -> token rewards (score at the end, - coef * KL) -> estimator
                 -> advantage clip and domain weight
    the controller's update with this batch's KL

It holds what lives across steps, the KL controller and each domain's running reward moments, and hands it to
checkpoints (`state_dict` / `load_state_dict`). The arithmetic is in pure functions of rlvr/algorithms/.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import AdvantageInputs, AdvantageSettings, compute_advantages, episode_turns
from rlvr.algorithms.gigpo import step_advantages
from rlvr.algorithms.kl_control import make_kl_controller, reward_kl
from rlvr.algorithms.returns import token_level_rewards
from rlvr.algorithms.reward_processing import RunningMoments, process_advantages, process_rewards
from rlvr.algorithms.value_loss import explained_variance
from rlvr.config.root import Config
from rlvr.data.batch import TrainBatch


def advantage_settings(cfg: Config) -> AdvantageSettings:
    a = cfg.algorithm
    return AdvantageSettings(norm_by_std=a.norm_adv_by_std, gamma=a.gamma, lam=a.lam, gigpo_gamma=a.gigpo.gamma,
                             gigpo_omega=a.gigpo.omega, gigpo_step_norm=a.gigpo.step_norm)


class AdvantageStep:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.domains = list(cfg.domains)  # the order of the batch's domain_index
        self.settings = advantage_settings(cfg)
        self.processing = {d: cfg.reward_processing(d) for d in self.domains}
        self.running = {d: RunningMoments() for d in self.domains}
        algo = cfg.algorithm
        self.kl_ctrl = make_kl_controller(algo.kl_ctrl) if algo.use_kl_in_reward else None

    def __call__(self, batch: TrainBatch) -> tuple[TrainBatch, dict[str, float]]:
        """`batch` with `advantages` (and `returns` when the estimator gives them), and the phase's metrics."""
        mask = batch["loss_mask"]
        metrics: dict[str, float] = {}
        kl, kl_coef = None, 0.0
        if self.kl_ctrl is not None:
            kl, current_kl = reward_kl(batch["old_logp"], batch["ref_logp"], mask, self.cfg.algorithm.kl_penalty)
            kl_coef = self.kl_ctrl.value  # the coefficient this batch pays; the update is for the next one
            metrics.update({"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": kl_coef})
        advantages = torch.zeros_like(mask)
        returns: torch.Tensor | None = None
        for i, domain in enumerate(self.domains):
            rows = (batch["domain_index"] == i).nonzero().squeeze(1)
            if not len(rows):
                continue
            adv, ret, domain_metrics = self.domain(batch, rows, domain, None if kl is None else kl[rows], kl_coef)
            advantages[rows] = adv
            if ret is not None:
                returns = torch.zeros_like(mask) if returns is None else returns
                returns[rows] = ret
            metrics.update({f"{domain}/{k}": v for k, v in domain_metrics.items()})
        if self.kl_ctrl is not None:
            self.kl_ctrl.update(current_kl, n_steps=len(batch))
        batch = batch.with_tensor("advantages", advantages)
        if returns is not None:
            batch = batch.with_tensor("returns", returns)
            if batch.get("values") is not None:
                metrics.update(critic_metrics(batch["values"], returns, mask))
        return batch, metrics

    def domain(self, batch: TrainBatch, rows: torch.Tensor, domain: str, kl: torch.Tensor | None,
               kl_coef: float) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
        """One domain's advantages (and returns) over its rows only."""
        rp = self.processing[domain]
        mask = batch["loss_mask"][rows]
        valid, group_index = batch["valid"][rows], batch["group_index"][rows]
        scores, metrics = process_rewards(batch["scores"][rows], valid, group_index, rp, self.running[domain])

        def optional(key: str) -> torch.Tensor | None:
            t = batch.get(key)
            return None if t is None else t[rows]

        inp = AdvantageInputs(scores=scores, valid=valid, group_index=group_index, loss_mask=mask,
                              values=optional("values"), turn_index=optional("turn_index"),
                              token_rewards=None if kl is None else token_level_rewards(scores, mask, kl, kl_coef),
                              episode={k: batch[k][rows] for k in ("turn_reward", "state_id") if k in batch.tensors})
        adv, ret = compute_advantages(self.cfg.algorithm.adv_estimator, inp, self.settings)
        metrics.update(anchor_metrics(inp, self.settings))
        adv, adv_metrics = process_advantages(adv, mask, rp)
        tokens = mask.sum()
        metrics.update(adv_metrics)
        metrics["advantage/abs_mean"] = float(adv.abs().sum() / tokens) if tokens else 0.0
        return adv, ret, metrics

    def state_dict(self) -> dict:
        return {"kl_ctrl": None if self.kl_ctrl is None else self.kl_ctrl.state_dict(),
                "running": {d: r.state_dict() for d, r in self.running.items()}}

    def load_state_dict(self, state: dict) -> None:
        if self.kl_ctrl is not None and state.get("kl_ctrl") is not None:
            self.kl_ctrl.load_state_dict(state["kl_ctrl"])
        for d, r in state.get("running", {}).items():
            if d in self.running:
                self.running[d].load_state_dict(r)


def anchor_metrics(inputs: AdvantageInputs, settings: AdvantageSettings) -> dict[str, float]:
    """An env domain's anchor-state groups (GiGPO's step level) in this batch, whatever the estimator."""
    ep = episode_turns(inputs)
    if ep is None:
        return {}
    _, stats = step_advantages(ep, settings.gigpo_gamma, settings.gigpo_step_norm, settings.eps)
    return {f"gigpo/{k}": v for k, v in stats.items()}


def critic_metrics(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """How well the critic's values (before its update) predicted this batch's returns."""
    keep = mask.to(torch.bool)
    if not keep.any():
        return {}
    return {"critic/values/mean": float(values[keep].mean()), "critic/returns/mean": float(returns[keep].mean()),
            "critic/vf_explained_var": explained_variance(values, returns, mask)}
