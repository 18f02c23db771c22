"""The rollout correction's step in the driver: the batch the actor trains on, from the trainer's and the engine's
logprobs of the sampled tokens (the math: rlvr/algorithms/rollout_correction.py)."""

from __future__ import annotations

import torch

from rlvr.algorithms.rollout_correction import CorrectionSettings, correction_weights, mismatch_metrics
from rlvr.config.algorithm import RolloutCorrectionConfig
from rlvr.data.batch import TrainBatch


def settings_from_config(rc: RolloutCorrectionConfig) -> CorrectionSettings:
    return CorrectionSettings(is_level=rc.is_level, is_threshold=rc.is_threshold,
                              is_threshold_lower=rc.is_threshold_lower, rs_level=rc.rs_level,
                              rs_threshold=rc.rs_threshold, rs_threshold_lower=rc.rs_threshold_lower)


def correct_actor_batch(batch: TrainBatch, train_logp: torch.Tensor,
                        rc: RolloutCorrectionConfig) -> tuple[TrainBatch, dict[str, float]]:
    """(the actor's batch, rollout_corr/* metrics). Rejected tokens leave `loss_mask` (and so the loss's
    denominator; with `fixed_denominator` the original mask stays as `count_mask`, which the strategy counts);
    truncated IS weights travel as `rollout_is_weights`. The critic keeps training on the batch as it was."""
    mask, behav = batch["loss_mask"], batch["behav_logp"]
    settings = settings_from_config(rc)
    weights, keep, stats = correction_weights(train_logp, behav, mask, settings)
    metrics = {**(mismatch_metrics(train_logp, behav, mask) if rc.metrics else {}), **stats}
    if rc.rs_level is not None:
        batch = batch.with_tensor("loss_mask", keep)
        if rc.fixed_denominator:
            batch = batch.with_tensor("count_mask", mask)
    if rc.is_level is not None:
        batch = batch.with_tensor("rollout_is_weights", weights)
    return batch, metrics
