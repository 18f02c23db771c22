"""The whole configuration: every section, and the checks that span sections."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError, model_validator

from rlvr.algorithms.presets import expand_preset_sections
from rlvr.config.algorithm import WHOLE_BATCH_ESTIMATORS, AlgorithmConfig, RewardProcessingConfig
from rlvr.config.base import Strict, _keyed
from rlvr.config.cluster import JudgeServerConfig, PlacementSection, RayConfig, SandboxServerConfig
from rlvr.config.data import DataConfig, ModelConfig
from rlvr.config.domains import DomainConfig
from rlvr.config.generation import GenerationConfig, ValidationConfig
from rlvr.config.rollout import OverlapConfig, RolloutConfig
from rlvr.config.run import FaultsConfig, RunConfig, TrackersConfig
from rlvr.config.trainer import ActorTrainConfig, CriticConfig


class Config(Strict):
    run: RunConfig = RunConfig()
    trackers: TrackersConfig = TrackersConfig()
    ray: RayConfig = RayConfig()
    model: ModelConfig = ModelConfig()
    data: DataConfig
    domains: dict[str, DomainConfig]
    rollout: RolloutConfig = RolloutConfig()
    generation: GenerationConfig = GenerationConfig()
    validation: ValidationConfig = ValidationConfig()
    actor_train: ActorTrainConfig = ActorTrainConfig()
    critic: CriticConfig = CriticConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    judge_server: JudgeServerConfig = JudgeServerConfig()
    sandbox_server: SandboxServerConfig = SandboxServerConfig()
    overlap: OverlapConfig = OverlapConfig()
    faults: FaultsConfig = FaultsConfig()
    placement: PlacementSection = PlacementSection()

    @model_validator(mode="before")
    @classmethod
    def _preset_sections(cls, data: Any) -> Any:
        """A preset may also set defaults outside `algorithm` (DAPO turns on dynamic sampling in `rollout`)."""
        if isinstance(data, dict):
            data = expand_preset_sections(data)
        return data

    @model_validator(mode="after")
    def _cross_checks(self) -> "Config":
        domains = set(self.domains)
        if not domains:
            raise ValueError("domains: at least one domain (with a reward worker or an env) is needed")
        probs = self.rollout.domain_interleave_probs
        if not probs:
            if len(domains) > 1:
                raise _keyed("rollout.domain_interleave_probs", f"required with several domains {sorted(domains)}")
            self.rollout.domain_interleave_probs = {next(iter(domains)): 1.0}
        elif set(probs) != domains:
            raise _keyed(
                "rollout.domain_interleave_probs",
                f"must give a probability for exactly the configured domains {sorted(domains)}, got {sorted(probs)}",
            )
        elif abs(sum(probs.values()) - 1.0) > 1e-6:
            raise _keyed("rollout.domain_interleave_probs",
                         f"probabilities must sum to 1, they sum to {sum(probs.values()):.6g}")
        if self.rollout.group_size < 2 and self.algorithm.compares_within_group:
            raise _keyed("rollout.group_size", f"{self.rollout.group_size}: adv_estimator "
                         f"{self.algorithm.adv_estimator} compares the responses to one prompt with each other, so "
                         "with one response every advantage is 0; use 2 or more (or reinforce_pp / gae)")
        for tag, domain in self.data.tag_to_domain.items():
            if domain not in domains:
                raise _keyed(f"data.tag_to_domain.{tag}", f"domain '{domain}' is not one of {sorted(domains)}")
        cache = self.algorithm.overlong_cache_len
        if cache is not None and cache > self.generation.max_new_tokens:
            raise _keyed("algorithm.overlong_cache_len",
                         f"{cache} exceeds generation.max_new_tokens={self.generation.max_new_tokens}")
        band = self.rollout.filter.mean_band
        if band is not None and band[0] > band[1]:
            raise _keyed("rollout.filter.mean_band", f"low {band[0]} > high {band[1]}")
        batch = self.rollout.prompts_per_step * self.rollout.group_size
        for section in ("actor_train", "critic"):
            mini = getattr(self, section).mini_batch_size
            if mini is not None and batch % mini:
                raise _keyed(f"{section}.mini_batch_size",
                             f"{mini} must divide the batch of {batch} sequences (prompts_per_step x group_size)")
        for domain in self.domains:
            self.reward_processing(domain)  # an unknown or invalid override is an error naming its key
        if self.algorithm.needs_critic and self.critic.critic_warmup >= self.run.max_steps:
            raise _keyed("critic.critic_warmup", f"{self.critic.critic_warmup} warm-up steps leave no step of "
                         f"run.max_steps={self.run.max_steps} for the actor")
        self._check_overlap()
        self._check_rollout_correction()
        self._check_scale()
        return self

    def reward_processing(self, domain: str) -> RewardProcessingConfig:
        """algorithm.reward_processing with domains.<domain>.reward_processing's keys over it."""
        override = self.domains[domain].reward_processing
        try:
            return RewardProcessingConfig(**{**self.algorithm.reward_processing.model_dump(), **override})
        except ValidationError as err:
            item = err.errors()[0]
            key = ".".join(str(p) for p in item["loc"])
            raise _keyed(f"domains.{domain}.reward_processing.{key}",
                         "unknown key" if item["type"] == "extra_forbidden" else item["msg"]) from None

    def _check_scale(self) -> None:
        gen = self.generation
        if gen.tensor_parallel_size > 1 and gen.engine != "vllm":
            raise _keyed("generation.tensor_parallel_size", f"{gen.tensor_parallel_size} needs engine: vllm")
        if gen.tensor_parallel_size > 1 and self.placement.actor_infer.colocate_with:
            raise _keyed("placement.actor_infer.colocate_with", "a colocated worker lives in one actor_train "
                         "bundle: tensor_parallel_size must be 1")

    def _check_overlap(self) -> None:
        overlap, train = self.overlap, self.actor_train
        if overlap.mini_batch_pipeline:
            mini, group = train.mini_batch_size, self.rollout.group_size
            if mini is None or mini % group:
                raise _keyed("actor_train.mini_batch_size", f"overlap.mini_batch_pipeline trains whole groups as "
                             f"they complete: set a multiple of rollout.group_size={group}, got {mini}")
            if train.ppo_epochs != 1:
                raise _keyed("actor_train.ppo_epochs", "overlap.mini_batch_pipeline makes one pass (ppo_epochs=1)")
            estimator = self.algorithm.adv_estimator
            if estimator in WHOLE_BATCH_ESTIMATORS:
                raise _keyed("algorithm.adv_estimator", f"{estimator} {WHOLE_BATCH_ESTIMATORS[estimator]}, which "
                             "overlap.mini_batch_pipeline never holds at once; use grpo, dr_grpo or rloo")
            for domain in self.domains:
                rp = self.reward_processing(domain)
                for key in ("norm_mean_type", "norm_std_type"):
                    if getattr(rp, key) == "batch":
                        section = (f"domains.{domain}" if key in self.domains[domain].reward_processing
                                   else "algorithm")
                        where = f"{section}.reward_processing.{key}"
                        raise _keyed(where, "batch normalisation needs the whole batch, which overlap."
                                     "mini_batch_pipeline never holds at once; use group or running")
        if self.uses_behaviour_logprobs and not self.generation.return_logprobs:
            # The behaviour policy's logprobs anchor the PPO ratio of data the trainer can no longer recompute.
            self.generation.return_logprobs = True

    @property
    def uses_behaviour_logprobs(self) -> bool:
        return self.trains_on_stale_data or self.algorithm.decoupled_loss or self.algorithm.rollout_correction.active

    @property
    def trains_on_stale_data(self) -> bool:
        """The batch was generated by weights the trainer no longer has (its PPO anchor: the behaviour logprobs)."""
        return self.overlap.mini_batch_pipeline or self.overlap.one_step_off_policy

    @property
    def single_update(self) -> bool:
        """One optimizer step per batch: the policy that sampled the batch *is* the trainer's before it."""
        t = self.actor_train
        return t.ppo_epochs == 1 and (t.mini_batch_size is None or t.mini_batch_size >= self.train_batch_size)

    @property
    def corrects_in_update(self) -> bool:
        """The rollout correction's trainer logprobs come from the actor's update itself (its forward, before its
        one optimizer step) instead of a forward pass of their own: on-policy, one update, nothing else asking
        for old-policy logprobs, and IS only (rejection's denominator must be known before the first
        micro-batch's loss)."""
        algo = self.algorithm
        return (algo.rollout_correction.rs_level is None and self.single_update and not self.trains_on_stale_data
                and not algo.decoupled_loss and not algo.use_kl_in_reward)

    def _check_rollout_correction(self) -> None:
        algo = self.algorithm
        if algo.rollout_correction.is_level and self.trains_on_stale_data and not algo.decoupled_loss:
            raise _keyed("algorithm.rollout_correction.is_level", "with overlap.mini_batch_pipeline or "
                         "one_step_off_policy the PPO ratio is already taken against the rollout policy's "
                         "logprobs; IS weights on top would correct twice. Set algorithm.decoupled_loss: true "
                         "(the clip around the trainer's weights, the IS weights in place of behaviour_weight_cap's)")

    @model_validator(mode="after")
    def _check_weight_sync(self) -> "Config":
        t = self.actor_train
        if t.uses_bf16_weights and t.weight_sync_check_every and self.generation.dtype == "float32":
            raise _keyed("actor_train.bf16_weights", "bf16 weights make the trainer's forward bf16, which "
                         "the weight-sync check cannot compare with generation.dtype=float32 at its fp32 tolerance; "
                         "set bf16_weights: false (fp32 weights, bf16 autocast), generation.dtype: bfloat16, or "
                         "actor_train.weight_sync_check_every: 0")
        return self

    @property
    def needs_reference(self) -> bool:
        """A KL term of either kind: the loss (kl_loss_coef > 0) or the reward (use_kl_in_reward)."""
        return self.algorithm.kl_loss_coef > 0 or self.algorithm.use_kl_in_reward

    @property
    def reference_worker(self) -> bool:
        """The reference is a process of its own: a KL term without actor_train.lora (under LoRA it is actor_train
        with its adapters off)."""
        return self.needs_reference and self.actor_train.lora is None

    @property
    def train_batch_size(self) -> int:
        return self.rollout.prompts_per_step * self.rollout.group_size
