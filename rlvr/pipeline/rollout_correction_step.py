"""The rollout correction's step in the driver: the batch the actor trains on, from the trainer's and the engine's
logprobs of the sampled tokens (the math: rlvr/algorithms/rollout_correction.py)."""

from __future__ import annotations

import torch

from rlvr.algorithms.rollout_correction import CorrectionSettings, correction_weights, mismatch_metrics
from rlvr.config.algorithm import RolloutCorrectionConfig
from rlvr.data.batch import TrainBatch


def correct_actor_batch(batch: TrainBatch, train_logp: torch.Tensor,
                        rc: RolloutCorrectionConfig) -> tuple[TrainBatch, dict[str, float]]:
    """(the actor's batch, rollout_corr/* metrics). Rejected tokens leave `loss_mask` (and so the loss's
    denominator; with `fixed_denominator` the original mask stays as `count_mask`, which the strategy counts);
    truncated IS weights travel as `rollout_is_weights`. The critic keeps training on the batch as it was."""
    weights, keep, metrics = _weights_and_metrics(batch, train_logp, rc)
    mask = batch["loss_mask"]
    if rc.rs_level is not None:
        batch = batch.with_tensor("loss_mask", keep)
        if rc.fixed_denominator:
            batch = batch.with_tensor("count_mask", mask)
    if rc.is_level is not None:
        batch = batch.with_tensor("rollout_is_weights", weights)
    return batch, metrics


def correction_metrics(batch: TrainBatch, train_logp: torch.Tensor, rc: RolloutCorrectionConfig) -> dict[str, float]:
    """The rollout_corr/* metrics alone, for a batch whose weights the actor computed in its update
    (`ObjectiveSettings.rollout_is`; `train_logp` from that update's forward): the same numbers as
    `correct_actor_batch` gives from a forward pass of its own."""
    return _weights_and_metrics(batch, train_logp, rc)[2]


def _weights_and_metrics(batch: TrainBatch, train_logp: torch.Tensor, rc: RolloutCorrectionConfig):
    mask, behav = batch["loss_mask"], batch["behav_logp"]
    weights, keep, stats = correction_weights(train_logp, behav, mask, CorrectionSettings.from_fields(rc))
    return weights, keep, {**(mismatch_metrics(train_logp, behav, mask) if rc.metrics else {}), **stats}
