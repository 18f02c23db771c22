"""Per-token logprobs (and entropies) from logits: the one formula both engines and the trainer use, so they agree.

The trainer's loss needs, at every position, log softmax(z / T)[target] with its gradient, and the entropy of
softmax(z / T) as a metric (or, with an entropy bonus, with its gradient). Written as tensor expressions over the
whole [B, T, V] logits (V = 49,152 on the default model), each step is a pass over a 150-300 MB tensor: the fp32
copy, the division by T, logsumexp, then softmax, isneginf, masked_fill, a product and logsumexp again for the
entropy, and autograd keeps the fp32 copy alive until the backward pass reads it again. On a 2-core CPU those
passes cost more than the model's lm_head: in one torch-strategy step of configs/math.yaml (32 rows, bf16) they
took 2.0-4.5 of 12.7-15.1 s, the entropy metric alone 1.3-2.8 s.

`_FusedLogprobs` walks the logits in blocks of CHUNK positions instead, so each block's fp32 copy stays in cache
while every quantity is taken from it: the logsumexp once, the target's logit, and the entropy as lse - sum p z
from the same exp pass. It saves only the (bf16) logits and the logsumexps for the backward pass, which redoes
the block's softmax: d logp / dz = onehot - p, d H / dz = -p (z - lse + H), each divided by T. Same math as
autograd over the tensor expressions, to fp32 rounding (tests/unit/test_logprobs.py)."""

from __future__ import annotations

import itertools

import torch

CHUNK = 8  # positions per block on CPU: 8 x 49,152 fp32 logits = 1.5 MB, inside a core's L2 (fastest of 2-256 here)
CHUNK_GPU = 1024  # a GPU has no such cache to stay in, but a kernel launch per small block would cost more


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T)[target] in float32, [..., V] logits and [...] targets -> [...]; differentiable."""
    return _FusedLogprobs.apply(logits, targets, float(temperature), False)[0]


def token_logprobs_and_entropy(logits: torch.Tensor, targets: torch.Tensor,
                               temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """`token_logprobs` and the entropy of softmax(logits / T) at each position, both float32 and differentiable,
    from one pass over the logits. Logits of -inf (a masked vocabulary entry) have p = 0 and add nothing."""
    return _FusedLogprobs.apply(logits, targets, float(temperature), True)


def _blocks(logits: torch.Tensor):
    """(leading index, position slice) of every block of at most CHUNK positions along the second-last dim."""
    shape, chunk = logits.shape, CHUNK if logits.device.type == "cpu" else CHUNK_GPU
    for index in itertools.product(*map(range, shape[:-2])):
        for start in range(0, shape[-2], chunk):
            yield index, slice(start, min(start + chunk, shape[-2]))


def _scaled(block: torch.Tensor, temperature: float) -> torch.Tensor:
    """The block's logits / T in fp32, never written into the caller's tensor (an fp32 block's .float() is itself)."""
    z = block.float()
    if temperature == 1.0:
        return z  # only read from here on
    return z / temperature if z.data_ptr() == block.data_ptr() else z.div_(temperature)


def _zero_where_masked(product: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """`product` (p times something in z) with 0 where z = -inf: p is 0 there, and 0 * -inf would be NaN."""
    masked = torch.isneginf(z)  # once: a pass over a block of vocabulary-wide rows
    return product.masked_fill(masked, 0.0) if masked.any() else product


class _FusedLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, temperature, with_entropy):
        lead = logits.shape[:-1]
        logp = torch.empty(lead, dtype=torch.float32, device=logits.device)
        lse = torch.empty_like(logp)
        entropy = torch.empty_like(logp) if with_entropy else torch.zeros(0, device=logits.device)
        for index, cols in _blocks(logits):
            z = _scaled(logits[index][cols], temperature)
            block_lse = torch.logsumexp(z, dim=-1)
            lse[index][cols] = block_lse
            logp[index][cols] = z.gather(-1, targets[index][cols].unsqueeze(-1)).squeeze(-1) - block_lse
            if with_entropy:
                p = torch.exp(z - block_lse.unsqueeze(-1))
                entropy[index][cols] = block_lse - _zero_where_masked(p * z, z).sum(dim=-1)
        ctx.save_for_backward(logits, targets, lse, entropy)
        ctx.temperature = temperature
        ctx.set_materialize_grads(False)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        logits, targets, lse, entropy = ctx.saved_tensors
        temperature = ctx.temperature
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        for index, cols in _blocks(logits):
            z = _scaled(logits[index][cols], temperature)
            p = torch.exp(z - lse[index][cols].unsqueeze(-1))
            g = torch.zeros_like(z)
            if grad_logp is not None:  # d logp / dz = onehot(target) - p
                gl = grad_logp[index][cols].float().unsqueeze(-1)
                g.sub_(p * gl).scatter_add_(-1, targets[index][cols].unsqueeze(-1), gl)
            if grad_entropy is not None:  # dH / dz = -p (z - lse + H); p = 0 where z = -inf
                shift = (entropy[index][cols] - lse[index][cols]).unsqueeze(-1)
                term = _zero_where_masked(p * (z + shift), z)
                g.sub_(term * grad_entropy[index][cols].float().unsqueeze(-1))
            if temperature != 1.0:
                g.div_(temperature)
            grad[index][cols] = g
        return grad, None, None, None
