"""Gradient accumulation is split-invariant: TorchStrategy with micro-batches of 1 (or an uneven 3 + 1) gives the
same gradients, parameters and metrics after one step as one micro-batch of the whole mini-batch (4 rows).

The loss of every micro-batch is normalised by the token / sequence count of the whole mini-batch, so the summed
micro-batch gradients are the full-batch gradient. fp32 (no autocast), so the only differences are summation
order: gradients agree to 1e-5 relative (measured ~1e-7); the parameter updates agree to 5e-4 relative (L2;
measured <= 5e-5) and to 5e-5 absolute per entry, 5% of the step of ~lr = 1e-3 per entry (measured: up to 6e-6, on
entries whose gradient is of the order of Adam's eps = 1e-8, where lr * g / (|g| + eps) amplifies summation-order
noise).

Why gradients and grad_norm are compared and not only parameters: Adam's first step is lr * g / (|g| + eps), about
lr * sign(g), so it hides any error that scales the gradient by a constant (e.g. a wrong 1/n_micro factor).
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM

from rlvr.algorithms.actor_objective import ObjectiveSettings, actor_objective
from rlvr.backends.torch_strategy import TorchStrategy
from rlvr.config.trainer import ActorTrainConfig
from rlvr.data.batch import TrainBatch
from tests.helpers.train_batches import make_small_vocab_llama, make_train_batch

LR = 1e-3


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> str:
    return make_small_vocab_llama(tmp_path_factory.mktemp("tiny-llama"))


def make_batch() -> TrainBatch:
    """Four rows of different lengths; row 1's reward failed (no loss)."""
    return make_train_batch(4, 16, advantages=[1.0, -0.5, -1.2, 0.7])


def one_step(model_dir: str, micro: int, agg: str, batch: TrainBatch):
    cfg = ActorTrainConfig(lr=LR, micro_batch_size=micro, bf16_autocast=False, max_grad_norm=None,
                           weight_decay=0.01)
    strategy = TorchStrategy(model_dir, cfg, total_steps=4, seed=0)
    settings = ObjectiveSettings(loss_agg_mode=agg, entropy_coef=0.01, max_response_len=16)

    def loss_fn(logp, entropy, mb, n_tokens, n_seqs):
        return actor_objective(logp, entropy, mb.tensors, settings, n_tokens, n_seqs)

    before = {k: p.detach().clone() for k, p in strategy.model.named_parameters()}
    metrics = strategy.train_step(batch, loss_fn, temperature=0.9, need_entropy_grad=True)
    params = {k: p.detach().clone() for k, p in strategy.model.named_parameters()}
    grads = {k: p.grad.detach().clone() for k, p in strategy.model.named_parameters()}
    updates = {k: params[k] - before[k] for k in params}
    return params, updates, grads, metrics


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("micro", [1, 3])
def test_micro_batch_split_gives_the_full_batch_update(tiny_llama, micro, agg):
    batch = make_batch()
    full_p, full_u, full_g, full_m = one_step(tiny_llama, 4, agg, batch)
    split_p, split_u, split_g, split_m = one_step(tiny_llama, micro, agg, batch)

    g_full = torch.cat([g.flatten() for g in full_g.values()])
    g_split = torch.cat([split_g[k].flatten() for k in full_g])
    grad_rel = float((g_split - g_full).norm() / g_full.norm())
    param_diff = max(float((split_p[k] - full_p[k]).abs().max()) for k in full_p)
    u_full = torch.cat([u.flatten() for u in full_u.values()])
    u_split = torch.cat([split_u[k].flatten() for k in full_u])
    update_rel = float((u_split - u_full).norm() / u_full.norm())
    print(f"micro {micro} vs 4, {agg}: grad rel diff {grad_rel:.2e}, update rel diff {update_rel:.2e}, "
          f"param max abs diff {param_diff:.2e}, "
          f"grad_norm {split_m['grad_norm']:.6f} vs {full_m['grad_norm']:.6f}")
    assert g_full.norm() > 0
    assert grad_rel < 1e-5
    assert update_rel < 5e-4
    assert param_diff < 5e-5  # the step moved entries by ~LR = 1e-3
    for key in ("loss", "pg_loss", "entropy", "grad_norm"):
        assert split_m[key] == pytest.approx(full_m[key], rel=1e-5, abs=1e-7), key
    assert split_m["updates"] == full_m["updates"] == 1


def test_a_step_moves_the_parameters(tiny_llama):
    """The comparison above is not vacuous: one step changes every trained tensor by about the learning rate."""
    batch = make_batch()
    before = {k: v.clone() for k, v in LlamaForCausalLM.from_pretrained(tiny_llama).state_dict().items()}
    after, _, _, _ = one_step(tiny_llama, 4, "token-mean", batch)
    moved = max(float((after[k] - before[k]).abs().max()) for k in after)
    assert 0.5 * LR < moved < 2.5 * LR


def test_logits_only_from_the_first_response_token_give_the_same_update(tiny_llama, monkeypatch):
    """train_step computes logits from the micro-batch's first loss column on (prompt positions have no loss);
    forcing column 0 (the full logits) must give the same gradients."""
    batch = make_batch()
    assert batch.first_loss_column() >= 2  # prompts of 3-5 tokens: the shortcut really skips columns here
    _, _, short_g, short_m = one_step(tiny_llama, 2, "token-mean", batch)
    monkeypatch.setattr(TrainBatch, "first_loss_column", lambda self: 0)
    _, _, full_g, full_m = one_step(tiny_llama, 2, "token-mean", batch)
    g_full = torch.cat([g.flatten() for g in full_g.values()])
    g_short = torch.cat([short_g[k].flatten() for k in full_g])
    assert float((g_short - g_full).norm() / g_full.norm()) < 1e-5
    for key in ("loss", "pg_loss", "entropy", "grad_norm"):
        assert short_m[key] == pytest.approx(full_m[key], rel=1e-5, abs=1e-7), key


def strategy_with_micro(model_dir: str, micro: int) -> TorchStrategy:
    cfg = ActorTrainConfig(lr=LR, micro_batch_size=micro, bf16_autocast=False)
    return TorchStrategy(model_dir, cfg, total_steps=1, seed=0)


def test_micro_batches_are_grouped_by_length_and_rows_return_to_their_places(tiny_llama):
    batch = make_train_batch(8, 16, seed=3)
    lengths = batch["attention_mask"].sum(dim=1)
    strategy = strategy_with_micro(tiny_llama, 2)
    micros = strategy._shard(batch)
    assert sorted(int(i) for _, positions in micros for i in positions) == list(range(8))
    widths = [micro["input_ids"].shape[1] for micro, _ in micros]
    in_order = [int(lengths[i : i + 2].max()) for i in range(0, 8, 2)]
    assert sum(widths) < sum(in_order)  # less padding than consecutive rows
    assert widths == sorted(widths)

    whole = strategy_with_micro(tiny_llama, 8).forward_logprobs(batch)
    grouped = strategy.forward_logprobs(batch)
    real = batch["attention_mask"][:, 1:].bool()  # padding targets hold whatever a micro-batch's width gives
    assert torch.allclose(grouped[real], whole[real], atol=1e-5)  # each row's logprobs land in its own row
    at_loss = strategy.forward_logprobs(batch, loss_positions_only=True)
    assert torch.allclose(at_loss, whole * batch["loss_mask"], atol=1e-5)
    assert int((at_loss != 0).sum()) == int(batch["loss_mask"].sum())
