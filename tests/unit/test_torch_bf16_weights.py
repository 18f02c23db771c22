"""TorchStrategy with bf16 weights: a bf16 module computes, fp32 masters take the optimizer's update, gradients
accumulate over micro-batches in fp32, and checkpoints and weight sync carry the masters exactly.

Tolerances: the bf16 forward/backward differs from fp32's by bf16 rounding (8 bits of mantissa: ~4e-3 relative per
operation), so its gradient agrees with the fp32 gradient to 5e-2 relative (L2; measured 6e-3 on this model).
Accumulation is fp32 on the masters, so splitting a mini-batch into micro-batches changes the gradient only by
the bf16 rounding of each micro-batch's own gradient: 2e-2 relative (measured 4e-3)."""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithms.actor_objective import ObjectiveSettings, actor_objective
from rlvr.backends.bf16_rounding import dithered_bf16
from rlvr.backends.torch_strategy import TorchStrategy
from rlvr.config.base import ConfigError
from rlvr.config.load import config_from_dict
from rlvr.config.trainer import ActorTrainConfig
from tests.helpers.train_batches import make_small_vocab_llama, make_train_batch

LR = 1e-3
SETTINGS = ObjectiveSettings(loss_agg_mode="token-mean", max_response_len=16)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> str:
    return make_small_vocab_llama(tmp_path_factory.mktemp("tiny-llama"))


def strategy(model_dir: str, bf16_weights: bool, micro: int = 4) -> TorchStrategy:
    cfg = ActorTrainConfig(lr=LR, micro_batch_size=micro, bf16_autocast=bf16_weights, bf16_weights=bf16_weights,
                           max_grad_norm=None)
    return TorchStrategy(model_dir, cfg, total_steps=4, seed=0)


def train(s: TorchStrategy) -> dict[str, float]:
    batch = make_train_batch(4, 16, advantages=[1.0, -0.5, -1.2, 0.7])
    return s.train_step(batch, lambda logp, ent, mb, nt, ns: actor_objective(logp, ent, mb.tensors, SETTINGS, nt, ns))


def grads(s: TorchStrategy) -> torch.Tensor:
    params = s.masters.values() if s.masters else s.model.parameters()
    return torch.cat([p.grad.flatten().float() for p in params])


def test_the_module_is_bf16_and_the_optimizer_holds_fp32_masters(tiny_llama):
    s = strategy(tiny_llama, True)
    assert {p.dtype for p in s.model.parameters()} == {torch.bfloat16}
    assert {m.dtype for m in s.masters.values()} == {torch.float32}
    assert {p.dtype for g in s.optimizer.param_groups for p in g["params"]} == {torch.float32}
    assert s.masters.keys() == dict(s.model.named_parameters()).keys()  # the tied embedding once


def test_a_step_updates_the_masters_and_rounds_them_into_the_module(tiny_llama):
    s = strategy(tiny_llama, True)
    before = {k: m.detach().clone() for k, m in s.masters.items()}
    metrics = train(s)
    assert metrics["updates"] == 1 and metrics["grad_norm"] > 0
    moved = max(float((m.detach() - before[k]).abs().max()) for k, m in s.masters.items())
    assert moved == pytest.approx(LR, rel=0.05)  # Adam's first step: lr * sign(g)
    for name, p in s.model.named_parameters():
        assert torch.equal(p, dithered_bf16(s.masters[name], s.thresholds[name])), name
        assert p.grad is None  # the gradient lives on the master only
    # steps smaller than bf16's resolution still add up in the masters
    assert any(not torch.equal(m, m.to(torch.bfloat16).float()) for m in s.masters.values())


def test_the_gradient_matches_fp32_within_bf16_rounding(tiny_llama):
    bf16, fp32 = strategy(tiny_llama, True), strategy(tiny_llama, False)
    train(bf16), train(fp32)
    g16, g32 = grads(bf16), grads(fp32)
    rel = float((g16 - g32).norm() / g32.norm())
    print(f"bf16 weights vs fp32: gradient rel diff {rel:.2e}")
    assert rel < 5e-2


def test_micro_batches_accumulate_in_fp32(tiny_llama):
    whole, split = strategy(tiny_llama, True, micro=4), strategy(tiny_llama, True, micro=1)
    train(whole), train(split)
    rel = float((grads(split) - grads(whole)).norm() / grads(whole).norm())
    print(f"bf16 weights, micro 1 vs 4: gradient rel diff {rel:.2e}")
    assert rel < 2e-2


def test_sync_checkpoint_and_resume_carry_the_masters(tiny_llama, tmp_path):
    s = strategy(tiny_llama, True)
    train(s)
    fp32 = s.named_parameters_for_sync(torch.float32)
    assert all(torch.equal(fp32[k], m.detach()) for k, m in s.masters.items())
    bf16 = s.named_parameters_for_sync(torch.bfloat16)
    assert all(torch.equal(bf16[k], p.detach()) for k, p in s.model.named_parameters())
    s.save(str(tmp_path / "ckpt"))
    resumed = strategy(tiny_llama, True)
    resumed.load(str(tmp_path / "ckpt"))
    assert all(torch.equal(resumed.masters[k], m) for k, m in s.masters.items())
    assert all(torch.equal(p, dict(s.model.named_parameters())[k]) for k, p in resumed.model.named_parameters())
    after_a, after_b = train(s), train(resumed)  # the optimizer state came back too: the same next step
    assert after_a["grad_norm"] == pytest.approx(after_b["grad_norm"], rel=1e-6)
    assert all(torch.equal(resumed.masters[k], m) for k, m in s.masters.items())


def test_the_key_moved_from_the_deepspeed_section():
    tree = {"data": {"train_files": ["x.jsonl"]}, "domains": {"d": {"reward": {"worker": "x.Y"}}},
            "actor_train": {"strategy": "deepspeed", "deepspeed": {"bf16_weights": False}}}
    with pytest.raises(ConfigError, match="actor_train.deepspeed.bf16_weights: moved one level up"):
        config_from_dict(tree)
    assert not ActorTrainConfig(bf16_autocast=True).uses_bf16_weights  # torch: autocast over fp32 weights unless asked
    assert ActorTrainConfig(strategy="deepspeed", bf16_autocast=True).uses_bf16_weights
    assert not ActorTrainConfig(bf16_autocast=False, bf16_weights=True).uses_bf16_weights


@pytest.fixture(scope="module")
def tiny_llama_on_the_bf16_grid(tmp_path_factory, tiny_llama) -> str:
    """The tiny Llama with every weight an exact bf16 value, as the default model's are, and none below 0.05 in
    magnitude (bf16 steps of at least 1.2e-4, as for most of the default model's weights)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_((torch.where(p < 0, -1.0, 1.0) * p.abs().clamp(min=0.05)).to(torch.bfloat16))
    out = tmp_path_factory.mktemp("tiny-llama-bf16-grid")
    model.save_pretrained(out)
    return str(out)


@pytest.mark.parametrize("rounding", ["nearest", "dithered"])
def test_a_small_step_moves_the_module_only_under_dithered_rounding(tiny_llama_on_the_bf16_grid, rounding):
    """lr 1e-5 against bf16 steps of 1.2e-4 and more: round-to-nearest leaves the whole module where it was
    (the freeze that kept bf16 runs from learning), dithered rounding flips about lr / step of the weights."""
    cfg = ActorTrainConfig(lr=1e-5, micro_batch_size=4, bf16_autocast=True, bf16_weights=True, max_grad_norm=None,
                           bf16_rounding=rounding)
    s = TorchStrategy(tiny_llama_on_the_bf16_grid, cfg, total_steps=4, seed=0)
    before = {k: p.detach().clone() for k, p in s.model.named_parameters()}
    assert all(torch.equal(before[k], m.to(torch.bfloat16)) for k, m in s.masters.items())  # starts as loaded
    train(s)
    changed = sum(int((p != before[k]).sum()) for k, p in s.model.named_parameters())
    total = sum(p.numel() for p in before.values())
    print(f"{rounding}: {changed} of {total} bf16 weights changed")
    if rounding == "nearest":
        assert changed == 0
    else:
        assert 0.01 * total < changed < 0.5 * total
