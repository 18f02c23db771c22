"""The rollout correction inside the actor's update (on-policy, one optimizer step over the batch): the update's own
forward gives the trainer's logprobs before it, so the driver's extra forward pass for them is not needed.

TorchStrategy on a tiny fp32 Llama: `train_step_with_logprobs` returns what `forward_logprobs` gives before the
update, and weighing the tokens in the objective (`ObjectiveSettings.rollout_is`) moves the weights exactly as the
driver's weights from its own forward (`correct_actor_batch`) do."""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithms.actor_objective import ObjectiveSettings, actor_objective
from rlvr.algorithms.rollout_correction import CorrectionSettings
from rlvr.backends.torch_strategy import TorchStrategy
from rlvr.config.algorithm import RolloutCorrectionConfig
from rlvr.config.trainer import ActorTrainConfig
from rlvr.pipeline.rollout_correction_step import correct_actor_batch, correction_metrics
from tests.helpers.train_batches import make_small_vocab_llama, make_train_batch

RC = RolloutCorrectionConfig(is_level="geometric", is_threshold=1.2)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> str:
    return make_small_vocab_llama(tmp_path_factory.mktemp("tiny-llama"))


def strategy(model_dir: str, **cfg) -> TorchStrategy:
    return TorchStrategy(model_dir, ActorTrainConfig(lr=1e-3, micro_batch_size=2, max_grad_norm=None, **cfg),
                         total_steps=4, seed=0)


def loss_fn(settings: ObjectiveSettings):
    return lambda logp, ent, mb, nt, ns: actor_objective(logp, ent, mb.tensors, settings, nt, ns)


def batch_with_behaviour(s: TorchStrategy):
    """make_train_batch's rows (micro-batches of 2 rows: several, of different widths) with engine logprobs that
    differ from the trainer's by up to +-0.3 on the loss tokens."""
    batch = make_train_batch(6, 16)
    noise = 0.3 * (2 * torch.rand(batch["loss_mask"].shape, generator=torch.Generator().manual_seed(3)) - 1)
    behav = (s.forward_logprobs(batch, loss_positions_only=True) + noise) * batch["loss_mask"]
    return batch.with_tensor("behav_logp", behav)


def masters(s: TorchStrategy) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in s.model.parameters()])


def test_the_updates_logprobs_are_the_trainers_before_it(tiny_llama):
    s = strategy(tiny_llama)
    batch = batch_with_behaviour(s)
    before = s.forward_logprobs(batch, loss_positions_only=True)
    start = masters(s).clone()
    metrics, logp = s.train_step_with_logprobs(batch, loss_fn(ObjectiveSettings()))
    assert metrics["updates"] == 1 and not torch.equal(masters(s), start)  # it trained
    assert logp.shape == before.shape and torch.allclose(logp, before, atol=1e-5)
    assert torch.equal(logp == 0, before == 0)  # 0 off the loss mask (row 1 has no loss tokens)


def test_weights_in_the_update_train_as_the_drivers_weights_do(tiny_llama):
    own, driven = strategy(tiny_llama), strategy(tiny_llama)
    batch = batch_with_behaviour(own)
    settings = ObjectiveSettings(rollout_is=CorrectionSettings.from_fields(RC))
    own_metrics, logp = own.train_step_with_logprobs(batch, loss_fn(settings))

    corrected, driver_metrics = correct_actor_batch(batch, driven.forward_logprobs(batch, loss_positions_only=True),
                                                    RC)
    assert float(corrected["rollout_is_weights"][batch["loss_mask"] > 0].min()) < 0.99  # the weights matter here
    driven_metrics = driven.train_step(corrected, loss_fn(ObjectiveSettings()))
    assert torch.allclose(masters(own), masters(driven), atol=1e-6)
    assert own_metrics["pg_loss"] == pytest.approx(driven_metrics["pg_loss"], rel=1e-5)
    for key, value in correction_metrics(batch, logp, RC).items():  # the same rollout_corr/* numbers
        assert value == pytest.approx(driver_metrics[key], rel=1e-4, abs=1e-6), key


def test_logprobs_from_the_update_need_a_single_update(tiny_llama):
    s = strategy(tiny_llama, ppo_epochs=2)
    with pytest.raises(ValueError, match="one optimizer step over the whole batch"):
        s.train_step_with_logprobs(make_train_batch(4, 16), loss_fn(ObjectiveSettings()))
