"""Packed micro-batches (rlvr/data/packing.py, actor_train.max_tokens_per_micro_batch): the layout by hand, the
bins, and the packed path against the padded one: logprobs, values, losses and gradients equal within fp32
rounding (measured ~1e-7 relative), for every loss aggregation, normalised by the whole mini-batch's counts."""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithms.actor_objective import ObjectiveSettings, actor_objective
from rlvr.backends.torch_strategy import TorchStrategy
from rlvr.backends.value_spec import value_spec
from rlvr.config.trainer import ActorTrainConfig, CriticConfig
from rlvr.data.packing import (balanced_bins, pack_layout, pack_units, packed_input_ids, packed_unit_ids,
                               prefix_lengths, prefix_units, unit_tokens)
from rlvr.models.segment_attention import NAME
from tests.helpers.train_batches import make_group_batch, make_small_vocab_llama, make_train_batch

LR = 1e-3


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> str:
    return make_small_vocab_llama(tmp_path_factory.mktemp("tiny-llama"))


def test_layout_by_hand():
    layout = pack_layout([4, 3], start=1)
    assert layout.position_ids.tolist() == [[0, 1, 2, 3, 0, 1, 2]]
    # row 0 keeps target columns 1, 2 (positions 1, 2); row 1 column 1 (position 4 + 1)
    assert layout.keep.tolist() == [1, 2, 5]
    assert layout.rows.tolist() == [0, 0, 1] and layout.cols.tolist() == [0, 1, 0]
    out = torch.tensor([[[1.0], [2.0], [3.0]]])
    assert layout.scatter(out, 2, 3).squeeze(-1).tolist() == [[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]]
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 0]])
    assert packed_input_ids(ids, [4, 3]).tolist() == [[5, 6, 7, 8, 9, 10, 11]]


def test_bins_respect_the_budget_and_balance_the_totals():
    lengths = [90, 10, 60, 40, 50, 50, 30, 70]  # 400 tokens
    bins = balanced_bins(lengths, 140)
    assert sorted(i for b in bins for i in b) == list(range(8))
    totals = sorted(sum(lengths[i] for i in b) for b in bins)
    assert len(bins) == 3 and max(totals) <= 140 and max(totals) - min(totals) <= 20, totals
    assert balanced_bins([300, 20, 20], 100) == [[0], [1, 2]]  # a row over the budget alone
    assert balanced_bins([], 100) == []


def make_strategy(model_dir: str, packed: bool, micro: int = 4, spec=None, critic: bool = False,
                  share: bool = True) -> TorchStrategy:
    cls = CriticConfig if critic else ActorTrainConfig
    cfg = cls(lr=LR, micro_batch_size=micro, bf16_autocast=False, max_grad_norm=None,
              max_tokens_per_micro_batch=30 if packed else None, share_prompt_prefix=share)
    kwargs = {"spec": spec} if spec is not None else {}
    return TorchStrategy(model_dir, cfg, total_steps=4, seed=0, **kwargs)


def step_grads(s: TorchStrategy, batch, settings: ObjectiveSettings) -> tuple[torch.Tensor, dict]:
    """One policy step of `s` over `batch`: the flat gradient and the step's metrics."""
    metrics = s.train_step(batch, lambda lp, ent, mb, nt, ns: actor_objective(lp, ent, mb.tensors, settings, nt, ns),
                           need_entropy_grad=True)
    return torch.cat([p.grad.flatten() for p in s.model.parameters()]), metrics


def test_packed_logprobs_equal_the_padded(tiny_llama):
    batch = make_train_batch(6, 16)
    padded = make_strategy(tiny_llama, False).forward_logprobs(batch, 0.9, loss_positions_only=True)
    packed_strategy = make_strategy(tiny_llama, True)
    assert len(packed_strategy._shard(batch)) > 1  # several packed micro-batches (30-token budget)
    packed = packed_strategy.forward_logprobs(batch, 0.9, loss_positions_only=True)
    assert torch.allclose(packed, padded, atol=1e-5), float((packed - padded).abs().max())
    assert packed_strategy.model.config._attn_implementation == NAME  # each row attends to itself, no stream mask


def test_packed_values_equal_the_padded(tiny_llama):
    batch = make_train_batch(5, 16)
    head = lambda out, micro, start: out  # noqa: E731
    padded = make_strategy(tiny_llama, False, spec=value_spec(7), critic=True).forward_columns(
        batch, head, loss_positions_only=True)
    packed_strategy = make_strategy(tiny_llama, True, spec=value_spec(7), critic=True)
    packed = packed_strategy.forward_columns(batch, head, loss_positions_only=True)
    assert torch.allclose(packed, padded, atol=1e-5)
    assert packed_strategy.model.config._attn_implementation == NAME  # the critic's rows attend to themselves


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                 "seq-mean-token-sum-norm"])
def test_a_packed_step_equals_the_padded_one(tiny_llama, agg):
    """Micro-batches of different token counts: a loss normalised per micro-batch would weigh their tokens
    differently and move the gradient; normalised by the mini-batch's counts, packed equals padded."""
    batch = make_train_batch(6, 16, advantages=[1.0, -0.5, -1.2, 0.7, 0.3, -0.9])
    settings = ObjectiveSettings(loss_agg_mode=agg, entropy_coef=0.01, max_response_len=16)

    g_pad, m_pad = step_grads(make_strategy(tiny_llama, False, micro=6), batch, settings)
    packed = make_strategy(tiny_llama, True)
    sizes = {int(m["loss_mask"].sum()) for m, _ in packed._shard(batch)}
    assert len(sizes) > 1  # uneven micro-batches: the test can tell per-micro from global normalisation
    g_pack, m_pack = step_grads(packed, batch, settings)
    rel = float((g_pack - g_pad).norm() / g_pad.norm())
    assert rel < 1e-5, rel
    for key in ("loss", "pg_loss", "entropy"):
        assert m_pack[key] == pytest.approx(m_pad[key], rel=1e-5, abs=1e-7), key


# ------------------------------------------------------------------ rows that share a prompt (share_prompt_prefix)
def test_shared_prompt_layout_by_hand():
    # rows 0 and 1 share a 2-token prompt (lengths 4 and 3): the stream is the prompt once, then row 0's 2 response
    # tokens, then row 1's 1; the responses' position ids go on from the prompt's end
    ids = torch.tensor([[5, 6, 7, 8], [5, 6, 9, 0], [4, 3, 2, 0]])
    lengths, prefixes = [4, 3, 3], prefix_lengths(torch.tensor([[0, 1, 1], [0, 1, 0], [0, 0, 0]]), [4, 3, 3])
    assert prefixes == [2, 2, 3]  # row 2 has no loss position: all prompt, alone
    units = prefix_units(ids, lengths, prefixes)
    assert units == [[0, 1], [2]]
    layout = pack_units(lengths, prefixes, units, start=1)
    assert packed_unit_ids(ids, lengths, prefixes, units).tolist() == [[5, 6, 7, 8, 9, 4, 3, 2]]
    assert layout.position_ids.tolist() == [[0, 1, 2, 3, 2, 0, 1, 2]]
    assert layout.unit_lengths == (5, 3) and layout.unit_masks[1] is None
    # column 1 of rows 0 and 1 is the prediction from the shared prompt's last position (1); row 0's column 2 from
    # its first response token (2); row 2's column 1 from its own position 1 (stream 5 + 1)
    assert layout.keep.tolist() == [1, 2, 1, 6]
    assert layout.rows.tolist() == [0, 0, 1, 2] and layout.cols.tolist() == [0, 1, 0, 0]
    assert layout.unit_masks[0].int().tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],  # row 0's first response token: the prompt and itself
        [1, 1, 1, 1, 0],
        [1, 1, 0, 0, 1],  # row 1's response token: the prompt and itself, not row 0's response
    ]
    assert unit_tokens([0, 1], lengths, prefixes) == 5 and unit_tokens([2], lengths, prefixes) == 3


def test_only_the_same_prompt_tokens_share():
    batch = make_group_batch(3, 4, 16)
    lengths = batch["attention_mask"].sum(dim=1).tolist()
    prefixes = prefix_lengths(batch["loss_mask"], lengths)
    units = prefix_units(batch["input_ids"], lengths, prefixes)
    # group 0 (rows 0-3), row 4 alone (no loss), group 1's rest (5-7), group 2 (8-11), row 12 (a longer prompt)
    assert units == [[0, 1, 2, 3], [4], [5, 6, 7], [8, 9, 10, 11], [12]]


def test_shared_prompt_logprobs_and_values_equal_the_padded(tiny_llama):
    batch = make_group_batch(3, 4, 16)
    padded = make_strategy(tiny_llama, False).forward_logprobs(batch, 0.9, loss_positions_only=True)
    shared = make_strategy(tiny_llama, True)
    shard = shared._shard(batch)
    assert len(shard) > 1 and all(len(shared._units(m)[2]) < len(m) for m, _ in shard[:1])  # prompts shared
    out = shared.forward_logprobs(batch, 0.9, loss_positions_only=True)
    assert torch.allclose(out, padded, atol=1e-5), float((out - padded).abs().max())
    # every target column of the rows' tokens, the prompts' included (packing has none past a row's end)
    real = batch["attention_mask"][:, 1:].bool()
    full = [s.forward_logprobs(batch, 0.9)[real] for s in (shared, make_strategy(tiny_llama, False))]
    assert torch.allclose(full[0], full[1], atol=1e-5), float((full[0] - full[1]).abs().max())
    head = lambda out, micro, start: out  # noqa: E731
    values = [make_strategy(tiny_llama, packed, spec=value_spec(7), critic=True).forward_columns(
        batch, head, loss_positions_only=True) for packed in (False, True)]
    assert torch.allclose(values[1], values[0], atol=1e-5)


def test_a_unit_stays_in_one_micro_batch_and_costs_its_prompt_once(tiny_llama):
    batch = make_group_batch(3, 4, 16)
    shared, per_row = make_strategy(tiny_llama, True), make_strategy(tiny_llama, True, share=False)
    rows_of = lambda s: [set(positions.tolist()) for _, positions in s._shard(batch)]  # noqa: E731
    for unit in ([0, 1, 2, 3], [5, 6, 7], [8, 9, 10, 11]):
        assert any(set(unit) <= rows for rows in rows_of(shared)), unit
    def tokens(s: TorchStrategy) -> int:
        return sum(unit_tokens(u, lengths, prefixes) for m, _ in s._shard(batch)
                   for lengths, prefixes, units in [s._units(m)] for u in units)

    assert tokens(shared) < tokens(per_row) == int(batch["attention_mask"].sum())


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_a_shared_prompt_step_equals_the_padded_one(tiny_llama, agg):
    """The prompt computed once per group: its gradient is the sum of the group's rows', as in the padded step."""
    batch = make_group_batch(3, 4, 16)
    settings = ObjectiveSettings(loss_agg_mode=agg, entropy_coef=0.01, max_response_len=16)

    g_pad, m_pad = step_grads(make_strategy(tiny_llama, False, micro=13), batch, settings)
    g_shared, m_shared = step_grads(make_strategy(tiny_llama, True), batch, settings)
    rel = float((g_shared - g_pad).norm() / g_pad.norm())
    assert rel < 1e-5, rel
    for key in ("loss", "pg_loss", "entropy"):
        assert m_shared[key] == pytest.approx(m_pad[key], rel=1e-5, abs=1e-7), key
