"""The `algorithm` section of the config: advantages, policy loss, KL terms and reward processing. Part of
rlvr/config/root.py's Config; a module of its own because the algorithm table is long."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rlvr.algorithms.presets import expand_preset
from rlvr.config.base import Strict, _keyed

# Estimators whose statistics span the whole batch (of a domain), with the reason.
WHOLE_BATCH_ESTIMATORS = {"reinforce_pp_baseline": "whitens over the whole batch",
                          "reinforce_pp": "whitens over the whole batch",
                          "reinforce": "takes its baseline over the whole batch",
                          "gae": "whitens over the whole batch"}


class KLControlConfig(Strict):
    """The coefficient of the KL penalty in the reward (algorithm.use_kl_in_reward), verl's `kl_ctrl`."""

    type: Literal["fixed", "adaptive"] = "fixed"  # fixed: kl_coef throughout; adaptive: steered towards target_kl
    kl_coef: float = Field(0.001, gt=0)  # the fixed value, or the adaptive controller's initial one
    # adaptive (Ziegler et al., arXiv 1909.08593): coef *= 1 + clip(KL / target_kl - 1, -0.2, 0.2) * n / horizon,
    # n = sequences in the step
    target_kl: float = Field(0.1, gt=0)
    horizon: int = Field(10000, ge=1)  # sequences over which the adaptive coefficient moves by at most 20%


NORM_TYPES = Literal["none", "group", "batch", "running"]


class RewardProcessingConfig(Strict):
    """Per-domain reward post-processing before the advantage estimator (ROLL's list); rlvr/algorithms/
    reward_processing.py. `algorithm.reward_processing` holds the defaults, `domains.<d>.reward_processing`
    overrides them key by key for one domain. In order:

        r1 = (r + reward_shift) * reward_scale
        r2 = (r1 - mean) / (std + 1e-6)     mean per norm_mean_type (none: 0), std per norm_std_type (none: 1)
        r3 = clip(r2, -reward_clip, reward_clip)
        A  = estimator(r3, ...);  A = reward_weight * clip(A, -advantage_clip, advantage_clip)

    reward_weight scales the domain's advantages (after the estimator: a normalising estimator would cancel a
    weight on rewards); running statistics are kept per domain and checkpointed."""

    norm_mean_type: NORM_TYPES = "none"  # subtract the mean of the group, the batch, a running mean, or nothing
    norm_std_type: NORM_TYPES = "none"  # divide by the std of the group, the batch, a running std, or nothing
    reward_shift: float = 0.0  # added to the raw reward first
    reward_scale: float = 1.0  # multiplies the shifted reward
    reward_clip: float | None = Field(None, gt=0)  # |normalised reward| cap; None: no clip
    advantage_clip: float | None = Field(None, gt=0)  # |advantage| cap after the estimator; None: no clip
    reward_weight: float = Field(1.0, ge=0)  # scales this domain's advantages (its share of the gradient)


class GiGPOConfig(Strict):
    """GiGPO's step level (rlvr/algorithms/gigpo.py); the episode level follows algorithm.norm_adv_by_std."""

    gamma: float = Field(0.95, ge=0, le=1)  # discount of the step returns inside anchor groups
    omega: float = Field(1.0, ge=0)  # weight of the step-level advantage: A = A^E + omega * A^S
    step_norm: Literal["mean_norm", "mean_std_norm"] = "mean_norm"  # subtract the anchor-group mean (/ std)


class RolloutCorrectionConfig(Strict):
    """The rollout-trainer mismatch (rlvr/algorithms/rollout_correction.py, docs/algorithms.md): measured as
    `rollout_corr/*` whenever the samples carry behaviour logprobs, and corrected by truncated (is_*) and/or masked
    (rs_*) importance sampling between the engine's and the trainer's probabilities. Either correction turns on
    generation.return_logprobs. The trainer's logprobs come from the update's own forward in the on-policy single
    update with IS only (the actor weighs the tokens itself); rejection there costs one extra forward pass per
    step (its denominator is needed before the update); several updates per batch and the decoupled loss compute
    old logprobs anyway."""

    # truncated IS: each token's policy-gradient term times min(w, is_threshold), w = pi_train / pi_rollout of the
    # token (token), of the sequence's geometric mean (geometric) or of the sequence's product (sequence)
    is_level: Literal["token", "geometric", "sequence"] | None = None
    is_threshold: float = Field(2.0, gt=0)  # upper truncation of the IS weight
    is_threshold_lower: float | None = Field(None, gt=0)  # a weight below it is raised to it; None: no floor
    # masked IS (rejection): tokens / whole sequences whose ratio lies outside [rs_threshold_lower, rs_threshold]
    # leave the loss
    rs_level: Literal["token", "geometric", "sequence"] | None = None
    rs_threshold: float = Field(2.0, gt=1)  # ratios above it are rejected
    rs_threshold_lower: float | None = Field(None, gt=0, lt=1)  # ratios below it are rejected; None: 1/rs_threshold
    # Rejected tokens leave the loss's denominator (slime's fix, its PR 657); true: the denominator keeps counting
    # them, as AReaL does (the loss of a batch with rejections is then smaller)
    fixed_denominator: bool = False
    metrics: bool = True  # log rollout_corr/* whenever behaviour logprobs are at hand (false: no extra forward)

    @property
    def active(self) -> bool:
        return self.is_level is not None or self.rs_level is not None


class AlgorithmConfig(Strict):
    """Loss and advantage settings. `preset` expands to documented defaults (rlvr/algorithms/presets.py);
    every other key here overrides the preset's value."""

    preset: str = "grpo"
    # gigpo / multi_step_grpo: per-turn advantages on env domains; on reward domains the episode level alone
    # (one turn, nothing to assign), i.e. GRPO with norm_adv_by_std.
    adv_estimator: Literal["grpo", "dr_grpo", "rloo", "reinforce_pp_baseline", "reinforce", "reinforce_pp", "gae",
                           "gigpo", "multi_step_grpo"] = "grpo"
    gigpo: GiGPOConfig = GiGPOConfig()
    norm_adv_by_std: bool = True
    gamma: float = Field(1.0, ge=0, le=1)  # discount of token rewards (gae, reinforce, reinforce_pp)
    lam: float = Field(0.95, ge=0, le=1)  # GAE's lambda
    # ppo: token ratio, clipped; gspo: sequence ratio (length-normalised), clipped (arXiv 2507.18071); topr:
    # tapered off-policy REINFORCE (arXiv 2503.14286): plain REINFORCE on A >= 0, ratio truncated to [0, 1] on A < 0
    policy_loss: Literal["ppo", "gspo", "topr"] = "ppo"
    topr_positive_weight: float = Field(1.0, ge=0)  # topr: weight of the loss on tokens with A >= 0
    topr_negative_weight: float = Field(1.0, ge=0)  # topr: weight of the loss on tokens with A < 0
    clip_eps_low: float = Field(0.2, ge=0)
    clip_eps_high: float = Field(0.2, ge=0)
    dual_clip_c: float | None = Field(None, gt=1)
    loss_agg_mode: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = (
        "token-mean"
    )
    kl_loss_coef: float = Field(0.0, ge=0)  # > 0 starts the reference cluster
    kl_estimator: Literal["k1", "k2", "k3", "low_var_kl", "abs"] = "low_var_kl"
    # KL in the reward (independent of the KL loss above): token reward -= coef * KL_t, coef from kl_ctrl.
    use_kl_in_reward: bool = False  # true starts the reference cluster
    kl_penalty: Literal["k1", "k2", "k3", "low_var_kl", "abs"] = "k1"  # the KL estimator of the reward penalty
    kl_ctrl: KLControlConfig = KLControlConfig()
    reward_processing: RewardProcessingConfig = RewardProcessingConfig()
    entropy_coef: float = 0.0
    # DAPO soft overlong punishment (rlvr/algorithms/reward_shaping.py); L_max = generation.max_new_tokens.
    overlong_shaping: bool = False
    overlong_cache_len: int | None = Field(None, ge=1)  # None: a quarter of max_new_tokens
    overlong_penalty_factor: float = Field(1.0, ge=0)
    # Decoupled PPO (AReaL, arXiv 2505.24298) for off-policy data: the clip is around the proximal policy (the
    # trainer's current weights, one extra forward), and each token is weighted by pi_prox / pi_behaviour,
    # capped at behaviour_weight_cap.
    decoupled_loss: bool = False
    behaviour_weight_cap: float = Field(2.0, gt=0)
    rollout_correction: RolloutCorrectionConfig = RolloutCorrectionConfig()

    @model_validator(mode="after")
    def _consistent(self) -> "AlgorithmConfig":
        if self.kl_ctrl.type == "adaptive" and not self.use_kl_in_reward:
            raise _keyed("kl_ctrl.type", "an adaptive KL controller acts on the KL in the reward, which is off: "
                         "set algorithm.use_kl_in_reward: true (it starts the reference model) or kl_ctrl.type: "
                         "fixed")
        if self.dual_clip_c is not None and self.policy_loss != "ppo":
            raise _keyed("dual_clip_c", f"the dual clip is part of policy_loss: ppo, not {self.policy_loss}")
        return self

    @property
    def needs_critic(self) -> bool:
        return self.adv_estimator == "gae"

    @property
    def compares_within_group(self) -> bool:
        """The baseline is the other responses to the same prompt: with one response per prompt every advantage
        is 0. reinforce / reinforce_pp (batch-normalised returns) and gae (a critic) need no group."""
        return self.adv_estimator not in ("reinforce", "reinforce_pp", "gae")

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        if isinstance(data, str):
            data = {"preset": data}
        if isinstance(data, dict):
            data = expand_preset(data)
        return data
