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
from rlvr.data.packing import balanced_bins, pack_layout, packed_input_ids
from rlvr.models.segment_attention import NAME
from tests.helpers.train_batches import make_small_vocab_llama, make_train_batch

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


def make_strategy(model_dir: str, packed: bool, micro: int = 4, spec=None, critic: bool = False) -> TorchStrategy:
    cls = CriticConfig if critic else ActorTrainConfig
    cfg = cls(lr=LR, micro_batch_size=micro, bf16_autocast=False, max_grad_norm=None,
              max_tokens_per_micro_batch=30 if packed else None)
    kwargs = {"spec": spec} if spec is not None else {}
    return TorchStrategy(model_dir, cfg, total_steps=4, seed=0, **kwargs)


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

    def step(s: TorchStrategy):
        metrics = s.train_step(batch, lambda lp, ent, mb, nt, ns: actor_objective(lp, ent, mb.tensors, settings,
                                                                                 nt, ns), need_entropy_grad=True)
        return torch.cat([p.grad.flatten() for p in s.model.parameters()]), metrics

    g_pad, m_pad = step(make_strategy(tiny_llama, False, micro=6))
    packed = make_strategy(tiny_llama, True)
    sizes = {int(m["loss_mask"].sum()) for m, _ in packed._shard(batch)}
    assert len(sizes) > 1  # uneven micro-batches: the test can tell per-micro from global normalisation
    g_pack, m_pack = step(packed)
    rel = float((g_pack - g_pad).norm() / g_pad.norm())
    assert rel < 1e-5, rel
    for key in ("loss", "pg_loss", "entropy"):
        assert m_pack[key] == pytest.approx(m_pad[key], rel=1e-5, abs=1e-7), key
