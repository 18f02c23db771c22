"""The critic's value model trained by the shared strategy code (TorchStrategy): micro-batch splits give the
full-batch update, values land on the loss positions of their rows, and a checkpoint restores the critic exactly.
(The DeepSpeed ranks version: tests/integration/test_deepspeed_critic.py.) fp32, so only summation order differs:
gradients agree to 1e-5 relative, as for the actor (tests/unit/test_split_invariance.py)."""

from __future__ import annotations

import pytest
import torch

from rlvr.backends.torch_strategy import TorchStrategy
from rlvr.backends.value_spec import value_spec
from rlvr.config.trainer import CriticConfig
from rlvr.data.batch import TrainBatch
from rlvr.models.value_model import ValueModel, is_value_model_dir
from tests.helpers.train_batches import make_critic_batch, make_small_vocab_llama, value_loss_fn

LR = 1e-3


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> str:
    return make_small_vocab_llama(tmp_path_factory.mktemp("tiny-llama"))


def critic_batch(n: int = 4, seed: int = 1) -> TrainBatch:
    return make_critic_batch(n, 16, seed)


def critic(model_dir: str, micro: int, mini: int | None = None) -> TorchStrategy:
    cfg = CriticConfig(lr=LR, micro_batch_size=micro, mini_batch_size=mini, bf16_autocast=False, max_grad_norm=None)
    return TorchStrategy(model_dir, cfg, total_steps=4, seed=0, spec=value_spec(head_seed=7))


def train(strategy: TorchStrategy, batch: TrainBatch, cliprange: float | None = 0.2):
    return strategy.update(batch, value_loss_fn(cliprange))


def flat_grads(strategy: TorchStrategy) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in strategy.model.parameters()])


@pytest.mark.parametrize("micro", [1, 3])
def test_value_update_is_split_invariant(tiny_llama, micro):
    batch = critic_batch()
    full, split = critic(tiny_llama, 4), critic(tiny_llama, micro)
    full_m, split_m = train(full, batch), train(split, batch)
    g_full, g_split = flat_grads(full), flat_grads(split)
    assert g_full.norm() > 0
    assert float((g_split - g_full).norm() / g_full.norm()) < 1e-5
    for key in ("value_loss", "clipfrac", "vpred_mean", "grad_norm"):
        assert split_m[key] == pytest.approx(full_m[key], rel=1e-5, abs=1e-7), key
    assert 0 < full_m["clipfrac"] < 1  # the clip is exercised on some tokens and not others
    diff = max(float((a - b).detach().abs().max()) for a, b in zip(full.model.parameters(),
                                                                     split.model.parameters()))
    assert diff < 5e-5  # both took the same step of ~LR


def test_values_are_computed_at_the_loss_positions_of_their_rows(tiny_llama):
    batch = critic_batch(n=6, seed=3)
    strategy = critic(tiny_llama, 2)  # rows regrouped by length into micro-batches of 2
    values = strategy.forward_columns(batch, lambda out, micro, start: out, loss_positions_only=True)
    model = ValueModel.from_pretrained(tiny_llama, head_seed=7)
    with torch.no_grad():
        direct = model(batch["input_ids"], batch["attention_mask"])[:, :-1]  # V(s_t) at column t
    mask = batch["loss_mask"]
    assert torch.allclose(values, direct * mask, atol=1e-5)
    assert int((values != 0).sum()) == int(mask.sum())


def test_a_training_step_moves_values_towards_the_returns(tiny_llama):
    batch = critic_batch()
    strategy = critic(tiny_llama, 4)
    first = train(strategy, batch, cliprange=None)
    for _ in range(10):
        last = train(strategy, batch, cliprange=None)
    assert last["value_loss"] < 0.5 * first["value_loss"]


def test_checkpoint_restores_the_critic_exactly(tiny_llama, tmp_path):
    batch = critic_batch()
    strategy = critic(tiny_llama, 2)
    train(strategy, batch)
    strategy.save(str(tmp_path / "critic"))
    assert is_value_model_dir(tmp_path / "critic" / "model")
    saved = {k: v.clone() for k, v in strategy.model.state_dict().items()}
    after_saved = train(strategy, batch)
    params_after = [p.detach().clone() for p in strategy.model.parameters()]

    restored = critic(tiny_llama, 2)  # a fresh critic, as a resumed run builds it
    restored.load(str(tmp_path / "critic"))
    assert all(torch.equal(saved[k], v) for k, v in restored.model.state_dict().items())
    again = train(restored, batch)  # optimizer moments and LR schedule came back: the same next step
    assert again["value_loss"] == after_saved["value_loss"]
    assert all(torch.allclose(a, p, atol=1e-7) for a, p in zip(restored.model.parameters(), params_after))
    # a saved critic directory is itself a valid critic.model_path
    exported = ValueModel.from_pretrained(tmp_path / "critic" / "model", head_seed=123)
    assert all(torch.equal(saved[k], v) for k, v in exported.state_dict().items())
