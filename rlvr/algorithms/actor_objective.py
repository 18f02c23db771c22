"""The actor's objective for one micro-batch: clipped policy gradient + optional KL and entropy terms.

Pure function of tensors and settings; the training strategy calls it once per micro-batch with the global
token/sequence counts of the mini-batch, so the summed gradients equal the full mini-batch's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.algorithms.kl import kl_penalty
from rlvr.algorithms.policy_loss import aggregate_loss, behaviour_weights, gspo_loss, ppo_clip_loss, topr_loss
from rlvr.algorithms.rollout_correction import CorrectionSettings, correction_weights


@dataclass(frozen=True)
class ObjectiveSettings:
    policy_loss: str = "ppo"  # ppo | gspo | topr
    topr_positive_weight: float = 1.0
    topr_negative_weight: float = 1.0
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.2
    dual_clip_c: float | None = None
    loss_agg_mode: str = "token-mean"
    kl_loss_coef: float = 0.0
    kl_estimator: str = "low_var_kl"
    entropy_coef: float = 0.0
    max_response_len: int | None = None  # for seq-mean-token-sum-norm
    decoupled: bool = False  # decoupled PPO: old_logp is the proximal policy, behav_logp weights the tokens
    behaviour_weight_cap: float = 2.0
    # Truncated IS weights of the rollout correction computed here, from this forward's own logprobs, when the
    # batch does not bring them: in the on-policy single update those *are* the trainer's logprobs before the
    # update, so the driver needs no forward pass of its own for them (IS only: rejection changes the loss's
    # denominator, which must be known before the first micro-batch).
    rollout_is: CorrectionSettings | None = None


def actor_objective(
    logp: torch.Tensor,
    entropy: torch.Tensor,
    tensors: dict[str, torch.Tensor],
    settings: ObjectiveSettings,
    n_tokens: torch.Tensor,
    n_seqs: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Returns (loss, stats). Stats are this micro-batch's share of the mini-batch mean (weighted by its tokens),
    so summing them over the micro-batches gives the mini-batch value."""
    mask = tensors["loss_mask"]
    # On-policy single update: the behaviour policy is the current one, so old_logp = logp (ratio 1, no
    # extra forward pass). Otherwise the driver provides old_logp: recomputed before the first update, or the
    # behaviour logprobs for data the trainer can no longer recompute (mini-batch pipeline, off-policy), or
    # the proximal policy's for the decoupled loss.
    old_logp = tensors["old_logp"] if "old_logp" in tensors else logp.detach()
    pg, pg_stats = policy_gradient_loss(logp, old_logp, tensors["advantages"], mask, settings)
    if "rollout_is_weights" in tensors:
        # Rollout correction (rlvr/algorithms/rollout_correction.py): pi_train / pi_rollout, truncated, from the
        # driver. With the decoupled loss it is the same ratio (pi_prox = the trainer's weights before this
        # update), so it takes the place of the behaviour weights.
        pg = pg * tensors["rollout_is_weights"]
    elif settings.rollout_is is not None:
        weights, _, _ = correction_weights(logp.detach(), tensors["behav_logp"], mask, settings.rollout_is)
        pg = pg * weights
    elif settings.decoupled:
        weights, w_stats = behaviour_weights(old_logp, tensors["behav_logp"], mask, settings.behaviour_weight_cap)
        pg = pg * weights
        pg_stats = {**pg_stats, **w_stats}

    def agg(per_token: torch.Tensor) -> torch.Tensor:
        return aggregate_loss(per_token, mask, settings.loss_agg_mode, n_tokens_global=n_tokens,
                              n_seqs_global=n_seqs, max_response_len=settings.max_response_len)

    pg_loss = agg(pg)
    loss = pg_loss
    share = mask.sum() / n_tokens
    stats = {"pg_loss": pg_loss.detach(), **{k: v.detach() * share for k, v in pg_stats.items()}}
    if settings.kl_loss_coef > 0:
        kl = kl_penalty(logp, tensors["ref_logp"], settings.kl_estimator)
        kl_loss = agg(kl)
        loss = loss + settings.kl_loss_coef * kl_loss
        stats["kl_loss"] = kl_loss.detach()
    ent = (entropy * mask).sum() / n_tokens
    if settings.entropy_coef:
        loss = loss - settings.entropy_coef * ent
    stats["entropy"] = ent.detach()
    stats["loss"] = loss.detach()
    return loss, stats


def policy_gradient_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                         settings: ObjectiveSettings) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The per-token policy-gradient loss that `settings.policy_loss` names (rlvr/algorithms/policy_loss.py)."""
    if settings.policy_loss == "ppo":
        return ppo_clip_loss(logp, old_logp, advantages, mask, settings.clip_eps_low, settings.clip_eps_high,
                             settings.dual_clip_c)
    if settings.policy_loss == "gspo":
        return gspo_loss(logp, old_logp, advantages, mask, settings.clip_eps_low, settings.clip_eps_high)
    if settings.policy_loss == "topr":
        return topr_loss(logp, old_logp, advantages, mask, settings.topr_positive_weight,
                         settings.topr_negative_weight)
    raise ValueError(f"unknown policy loss {settings.policy_loss!r}; valid: ppo, gspo, topr")
