"""Rounding fp32 master weights into a bf16 module without freezing it.

A bf16 weight moves only in whole bf16 steps (2^-7 of its magnitude between powers of two), while Adam moves an
fp32 master by about the learning rate per step: at lr 1e-5 a weight of magnitude 0.1 needs ~25 updates in one
direction before round-to-nearest changes its bf16 copy. When the masters start *on* the bf16 grid, as a bf16
checkpoint's do (the default model's weights are 100% exact in bf16), every weight sits at the middle of its
rounding interval and the whole module stays frozen until the updates cross half a step: on the default model at
lr 1e-5, round-to-nearest moved the policy 0%, 7% and 13% as far as fp32 after 1, 5 and 10 steps, dithered
rounding 96%, 99% and 100% (bench/bf16_rounding.py; docs/precision.md).

Dithered rounding removes that bias: each weight gets a fixed random threshold in [0, 1) of its bf16 step (drawn
once from the seed), and its bf16 copy is the grid point below the master plus one step once the master's
fraction of a step passes 1 - threshold. A master on the grid rounds to itself (the module starts exactly as
loaded), and a master that has moved by d flips with probability d / step over the weights, so the module's
expected movement equals the masters' at every learning rate. Unlike stochastic rounding redrawn at every step,
the bf16 copy is a function of the master alone: no fresh noise per step, and a resumed run rounds identically.

Bit-level: truncating an fp32 to its upper 16 bits is bf16 rounding toward zero; adding the threshold's 16 bits
first carries into the kept bits exactly when the dropped fraction plus the threshold reaches one step (the
magnitude bits are the same for either sign, so it is symmetric about zero)."""

from __future__ import annotations

import torch

LOW_BITS = 0xFFFF  # the fp32 mantissa bits a bf16 drops


def dither_thresholds(shape: torch.Size, generator: torch.Generator) -> torch.Tensor:
    """A weight's fixed threshold as 8 bits (1/256 of a bf16 step is finer than any update that matters; 1 byte a
    weight beside the master's 4). Stored as uint8; `dithered_bf16` spreads it over the 16 dropped bits."""
    return torch.randint(0, 256, shape, generator=generator, dtype=torch.uint8)


CHUNK = 1 << 20  # elements rounded at a time: the int32 scratch (4 MiB) stays in cache


def dithered_bf16(master: torch.Tensor, thresholds: torch.Tensor) -> torch.Tensor:
    """The bf16 copy of an fp32 `master` under its `thresholds` (dither_thresholds): exact for values on the bf16
    grid, otherwise the lower or upper neighbour (in magnitude), the upper one for a fraction of the weights equal
    to the distance covered."""
    out = torch.empty(master.shape, dtype=torch.bfloat16, device=master.device)
    return dithered_bf16_into(out, master, thresholds)


def dithered_bf16_into(out: torch.Tensor, master: torch.Tensor, thresholds: torch.Tensor) -> torch.Tensor:
    """`dithered_bf16(master, thresholds)` written into the bf16 tensor `out`, in chunks of CHUNK elements with one
    scratch buffer: a whole-tensor expression made five int32 temporaries of the master's size, 0.9 s a step for
    the default model's 135M weights on a 2-core EPYC against 0.04 s in chunks (the same bits)."""
    bits = master.detach().float().contiguous().view(-1).view(torch.int32)
    flat_thresholds = thresholds.reshape(-1)
    target = out.view(-1) if out.is_contiguous() else torch.empty(out.numel(), dtype=out.dtype, device=out.device)
    scratch = torch.empty(min(CHUNK, bits.numel()), dtype=torch.int32, device=bits.device)
    for start in range(0, bits.numel(), CHUNK):
        end = min(start + CHUNK, bits.numel())
        kept = scratch[: end - start].copy_(flat_thresholds[start:end])
        # the 8 threshold bits at the top of the 16 dropped ones, centred in their 1/256 (+128), then truncation
        kept.mul_(256).add_(128).add_(bits[start:end]).bitwise_and_(~LOW_BITS)
        target[start:end].copy_(kept.view(torch.float32))  # exact: the low 16 bits are 0
    if target.data_ptr() != out.data_ptr():
        out.copy_(target.view(out.shape))
    return out


__all__ = ["dither_thresholds", "dithered_bf16", "dithered_bf16_into"]
