"""Attention over packed rows that costs what the rows cost: `attn_implementation="rlvr_segments"` for transformers.

A packed micro-batch lays its rows end to end in one stream (rlvr/data/packing.py). Through transformers' SDPA
path such a stream gets a dense block-diagonal mask, so attention costs (stream length)^2 whatever the rows: on
this project's 2-core CPU the packed bf16 step was 0.64x the padded one's speed (docs/precision.md), and on an H100
(scripts/gpu_check.py, SmolLM2-135M's shape, bf16) 0.566 s a step against 0.382 s padded. Here each row attends
only to itself: with the rows' cumulative lengths (`segment_kwargs`, passed to the model's forward, which hands
them to every attention layer as transformers does for flash attention's varlen path) the function runs

- on CUDA in bf16/fp16: flash attention's varlen kernel (`torch.nn.attention.varlen.varlen_attn`, as verl's
  `use_remove_padding` does through flash-attn): memory linear in the stream, where the dense mask is quadratic.
  Checked on an H100 with torch 2.11 by scripts/packed_attention_probe.py: the padded rows' logits within bf16
  rounding. Not faster there at 4096-token streams (0.670 s against SDPA's 0.523 s a step, 3 timed steps: a 135M
  model's step is launch-bound on an H100; one 16k-token stream took 0.218 s);
- elsewhere: one causal SDPA call per row, sum of length^2 work and no mask.

A unit of rows that share a prompt (rlvr/data/packing.py, `pack_units`) comes with a tree mask of its own
(`rlvr_unit_masks`): one SDPA call over the unit with that [n, n] mask, on every device (flash attention's varlen
kernel has no such mask).

Without segment lengths (padded rows) it is transformers' SDPA path unchanged, mask included, so a model loaded
with it computes padded batches exactly as before; except that bf16 attention on CPU is computed in fp32 and rounded
back (torch's CPU SDPA backward is 2x slower in bf16), which made one bf16 update of 32 rows ~12% faster (6.8-7.8 s
against 7.6-8.2 s, 6 alternating pairs). The trainers load every model with it.
"""

from __future__ import annotations

import functools
import inspect

import torch

NAME = "rlvr_segments"


def segment_kwargs(lengths: list[int], device: torch.device | str,
                   masks: tuple[torch.Tensor | None, ...] = ()) -> dict:
    """The forward kwargs that tell every attention layer where the packed units start and end, and (`masks`, one
    per unit, None for a row alone) the tree masks of units whose rows share a prompt."""
    cu = torch.tensor([0, *lengths]).cumsum(0).to(dtype=torch.int32, device=device)
    longest = max(lengths)
    kwargs = dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=longest, max_length_k=longest)
    if any(m is not None for m in masks):
        kwargs["rlvr_unit_masks"] = tuple(None if m is None else m.to(device) for m in masks)
    return kwargs


def _expand_kv(t: torch.Tensor, heads: int) -> torch.Tensor:
    """Grouped-query attention: each key/value head repeated for the query heads that share it (dim 1)."""
    return t if t.shape[1] == heads else t.repeat_interleave(heads // t.shape[1], dim=1)


@functools.cache  # once per process, not in every layer's forward
def _varlen_causal() -> dict:
    """torch 2.11+ says causal with window_size (-1, 0); earlier releases with is_causal."""
    from torch.nn.attention.varlen import varlen_attn

    return {"window_size": (-1, 0)} if "window_size" in inspect.signature(varlen_attn).parameters else {
        "is_causal": True}


def _varlen(query, key, value, cu, longest, scaling):
    from torch.nn.attention.varlen import varlen_attn

    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # [T, H, D]
    k, v = _expand_kv(k, q.shape[1]), _expand_kv(v, q.shape[1])
    return varlen_attn(q.contiguous(), k.contiguous(), v.contiguous(), cu, cu, longest, longest, scale=scaling,
                       **_varlen_causal())[None]


def _per_segment(query, key, value, cu, scaling, masks=None):
    heads = query.shape[1]
    key, value = _expand_kv(key, heads), _expand_kv(value, heads)
    bounds = cu.tolist()
    masks = masks or [None] * (len(bounds) - 1)
    outs = [torch.nn.functional.scaled_dot_product_attention(
        query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], attn_mask=mask, is_causal=mask is None, scale=scaling)
        for a, b, mask in zip(bounds[:-1], bounds[1:], masks)]
    return torch.cat(outs, dim=2).transpose(1, 2)  # [1, T, H, D]


def segment_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers' attention-function contract: query [B, H, T, D], key/value [B, H_kv, T, D] ->
    ([B, T, H, D], None)."""
    if query.device.type == "cpu" and query.dtype == torch.bfloat16:
        # torch's CPU SDPA backward is 2x slower in bf16 than in fp32 (SmolLM2's shape, 8 x 170 tokens: 22 ms
        # against 9-11 ms a layer; forward 2.9 against 3.8 ms): attention in fp32, the rest of the model in bf16.
        # With and without gradients alike, so the update's forward and the old-logprob forwards agree.
        mask = attention_mask.float() if attention_mask is not None and attention_mask.is_floating_point() \
            else attention_mask
        out, weights = segment_attention(module, query.float(), key.float(), value.float(), mask, dropout, scaling,
                                         **kwargs)
        return out.to(query.dtype), weights
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    if query.shape[0] != 1:
        raise ValueError(f"{NAME}: packed rows come as one stream (batch 1), got batch {query.shape[0]}")
    masks = kwargs.get("rlvr_unit_masks")
    if masks is None and query.is_cuda and query.dtype in (torch.bfloat16, torch.float16):
        return _varlen(query, key, value, cu, kwargs["max_length_q"], scaling), None
    return _per_segment(query, key, value, cu, scaling, masks), None


def _mask(*args, attention_mask=None, **kwargs):
    """SDPA's mask for padded rows; none for a packed stream (the segment lengths replace it, and building a
    stream^2 mask is the cost this path avoids)."""
    if attention_mask is None:
        return None
    from transformers.masking_utils import sdpa_mask

    return sdpa_mask(*args, attention_mask=attention_mask, **kwargs)


def register() -> str:
    """Makes `attn_implementation=NAME` known to transformers (idempotent; per process); returns NAME."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, segment_attention)
    AttentionMaskInterface.register(NAME, _mask)
    return NAME


def use_segment_attention(model: torch.nn.Module) -> torch.nn.Module:
    """`model` (a transformers model, or a module holding one, such as the critic's ValueModel) switched to NAME."""
    register()
    inner = next((m for m in model.modules() if hasattr(m, "set_attn_implementation")), None)
    if inner is None:
        raise TypeError(f"{type(model).__name__} holds no transformers model whose attention could be switched")
    inner.set_attn_implementation(NAME)
    return model
