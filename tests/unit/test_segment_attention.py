"""rlvr/models/segment_attention.py: packed rows attend to themselves alone, padded rows compute exactly as through
transformers' SDPA, and the misuse a caller can hit fails with a precise error."""

from __future__ import annotations

import pytest
import torch

from rlvr.models.segment_attention import NAME, _mask, segment_kwargs, use_segment_attention
from tests.helpers.train_batches import make_small_vocab_llama

pytestmark = pytest.mark.quick


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    path = make_small_vocab_llama(tmp_path_factory.mktemp("seg") / "m")
    sdpa = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    segments = use_segment_attention(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval())
    return sdpa, segments


def packed(model, rows):
    ids = torch.cat(rows)[None]
    pos = torch.cat([torch.arange(len(r)) for r in rows])[None]
    with torch.no_grad():
        return model(input_ids=ids, position_ids=pos, use_cache=False,
                     **segment_kwargs([len(r) for r in rows], "cpu")).logits[0]


def test_the_switch_names_the_implementation_but_a_saved_config_does_not(models, tmp_path):
    assert models[1].config._attn_implementation == NAME
    assert models[0].config._attn_implementation == "sdpa"
    models[1].config.save_pretrained(tmp_path)  # checkpoints and exports: vLLM and plain transformers load them
    assert NAME not in (tmp_path / "config.json").read_text()


def test_a_packed_row_sees_only_itself(models):
    _, model = models
    a, b = torch.tensor([5, 6, 7, 8, 9]), torch.tensor([10, 11, 12])
    out = packed(model, [a, b])
    changed = packed(model, [torch.tensor([40, 41, 42, 43, 44]), b])
    assert torch.equal(out[5:], changed[5:])  # b's logits do not depend on what stood before it in the stream
    assert not torch.allclose(out[:5], changed[:5])
    with torch.no_grad():
        alone = model(input_ids=b[None], use_cache=False).logits[0]
    torch.testing.assert_close(out[5:], alone, atol=1e-5, rtol=1e-5)


def test_padded_rows_compute_exactly_as_sdpa(models):
    sdpa, segments = models
    ids = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0]])
    mask = (torch.arange(6) < torch.tensor([[6], [3]])).long()
    with torch.no_grad():
        assert torch.equal(sdpa(input_ids=ids, attention_mask=mask).logits,
                           segments(input_ids=ids, attention_mask=mask).logits)


def test_a_packed_stream_builds_no_stream_squared_mask():
    assert _mask(1, 4096, 4096, attention_mask=None) is None
    padded = _mask(2, 3, 3, attention_mask=torch.tensor([[1, 1, 1], [1, 1, 0]]).bool())
    assert padded is not None and padded.shape == (2, 1, 3, 3)


def test_segment_kwargs_are_cumulative_lengths():
    kw = segment_kwargs([3, 5, 2], "cpu")
    assert kw["cu_seq_lens_q"].tolist() == [0, 3, 8, 10] and kw["cu_seq_lens_q"].dtype == torch.int32
    assert kw["max_length_q"] == kw["max_length_k"] == 5


def test_misuse_fails_precisely(models):
    _, model = models
    with pytest.raises(ValueError, match="batch 1"):
        model(input_ids=torch.ones(2, 4, dtype=torch.long), use_cache=False, **segment_kwargs([4], "cpu"))
    with pytest.raises(TypeError, match="no transformers model"):
        use_segment_attention(torch.nn.Linear(2, 2))


def test_bf16_attention_on_cpu_computes_in_fp32():
    """bf16 query/key/value on CPU: the output is fp32 SDPA's rounded to bf16 (torch's bf16 CPU backward is 2x
    slower than fp32's), and gradients come back in bf16. Plain bf16 SDPA rounds differently, so this tells the
    two paths apart."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from rlvr.models.segment_attention import segment_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, 40, 16, generator=g).bfloat16().requires_grad_(True) for h in (4, 2, 2))
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 2, True
    mask = torch.ones(40, 40, dtype=torch.bool).tril()[None, None].expand(2, 1, 40, 40).clone()
    mask[0, ..., 30:] = False
    out, _ = segment_attention(module, q, k, v, mask, scaling=0.25)
    exact = sdpa_attention_forward(module, q.float(), k.float(), v.float(), mask, scaling=0.25)[0]
    assert out.dtype == torch.bfloat16 and torch.equal(out, exact.to(torch.bfloat16))
    assert not torch.equal(out, sdpa_attention_forward(module, q, k, v, mask, scaling=0.25)[0])
    out.float().sum().backward()
    assert q.grad.dtype == k.grad.dtype == torch.bfloat16
