"""Training-side test inputs: a Llama small enough to train in a second (64-token vocabulary, random weights) and
synthetic TrainBatches of rows of different lengths, for the strategy tests (split invariance, DeepSpeed ranks)."""

from __future__ import annotations

from pathlib import Path

import torch

from rlvr.data.batch import TrainBatch


def make_small_vocab_llama(out: str | Path) -> str:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(config).save_pretrained(out)
    return str(out)


def make_train_batch(n: int, width: int, seed: int = 1, advantages: list[float] | None = None) -> TrainBatch:
    """n rows of 8..width tokens (right padding), prompts of 3-5 tokens, one advantage per row (drawn from the
    seed unless given); row 1's reward failed (loss_mask all 0)."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.zeros((n, width), dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    loss_mask = torch.zeros((n, width - 1))
    for b in range(n):
        length = int(torch.randint(8, width + 1, (1,), generator=g))
        prompt = int(torch.randint(3, 6, (1,), generator=g))
        input_ids[b, :length] = torch.randint(3, 64, (length,), generator=g)
        attention_mask[b, :length] = 1
        if b != 1:
            loss_mask[b, prompt - 1 : length - 1] = 1.0
    per_row = torch.randn(n, 1, generator=g) if advantages is None else torch.tensor(advantages)[:, None]
    return TrainBatch({"input_ids": input_ids, "attention_mask": attention_mask, "loss_mask": loss_mask,
                       "advantages": per_row * loss_mask})


def make_group_batch(groups: int, group_size: int, width: int, seed: int = 2) -> TrainBatch:
    """GRPO-shaped rows: `groups` prompts of 3-5 tokens, each repeated in `group_size` consecutive rows with
    responses of different lengths (rows up to `width` tokens), one advantage per row; the second group's first
    row's reward failed (loss_mask all 0, so it shares nothing), and the last row repeats the first group's prompt
    tokens with one token more (a different prompt: it must not share)."""
    g = torch.Generator().manual_seed(seed)
    n = groups * group_size + 1
    input_ids = torch.zeros((n, width), dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    loss_mask = torch.zeros((n, width - 1))
    prompts = [torch.randint(3, 64, (int(torch.randint(3, 6, (1,), generator=g)),), generator=g)
               for _ in range(groups)]
    first = prompts[0]
    prompts = [prompts[b // group_size] for b in range(n - 1)] + [torch.cat([first, first[:1]])]
    for b, prompt in enumerate(prompts):
        length = int(torch.randint(len(prompt) + 2, width + 1, (1,), generator=g))
        input_ids[b, : len(prompt)] = prompt
        input_ids[b, len(prompt) : length] = torch.randint(3, 64, (length - len(prompt),), generator=g)
        attention_mask[b, :length] = 1
        if b != group_size:
            loss_mask[b, len(prompt) - 1 : length - 1] = 1.0
    per_row = torch.randn(n, 1, generator=g)
    return TrainBatch({"input_ids": input_ids, "attention_mask": attention_mask, "loss_mask": loss_mask,
                       "advantages": per_row * loss_mask})


def make_critic_batch(n: int, width: int, seed: int = 1) -> TrainBatch:
    """make_train_batch's rows with what the critic trains on: old values (small) and returns (+-1) at the loss
    positions."""
    batch = make_train_batch(n, width, seed)
    g = torch.Generator().manual_seed(seed + 100)
    mask = batch["loss_mask"]
    return batch.with_tensor("values", 0.3 * torch.randn(mask.shape, generator=g) * mask).with_tensor(
        "returns", torch.randn(mask.shape, generator=g).sign() * mask)


def value_loss_fn(cliprange: float | None = 0.2):
    """The critic worker's micro-batch loss (rlvr/workers/critic.py) for a strategy's `update`."""
    from rlvr.algorithms.value_loss import ValueSettings, value_objective

    settings = ValueSettings(cliprange_value=cliprange)

    def micro_loss(values, micro, n_tokens, n_seqs):
        return value_objective(values, micro.tensors, settings, n_tokens, n_seqs)

    return micro_loss
