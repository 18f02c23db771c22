"""The blockwise logprob/entropy function (rlvr/backends/logprobs.py) against autograd over the plain tensor
formulas: values and gradients, with temperature, bf16 logits, non-contiguous views, lengths that are not a
multiple of the block, masked (-inf) vocabulary entries."""

import pytest
import torch

from rlvr.algorithms.policy_loss import entropy_from_logits
from rlvr.backends import logprobs as lp_module
from rlvr.backends.logprobs import token_logprobs, token_logprobs_and_entropy


def reference(logits: torch.Tensor, targets: torch.Tensor, temperature: float):
    """The formulas as tensor expressions, in float64: what the blockwise function must reproduce."""
    z = logits.double() / temperature
    logp = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(z, dim=-1)
    return logp, entropy_from_logits(z)


def make(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(*shape, generator=g) * 3).to(dtype)
    targets = torch.randint(0, shape[-1], shape[:-1], generator=g)
    return logits, targets


def grads(fn, logits, targets, temperature, w_logp, w_ent):
    x = logits.clone().requires_grad_(True)
    logp, entropy = fn(x, targets, temperature)
    ((logp * w_logp).sum() + (entropy * w_ent).sum()).backward()
    return logp.detach().double(), entropy.detach().double(), x.grad.double()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("shape", [(3, 21, 50), (21, 50), (2, 1, 7)])  # 21: not a multiple of the block
def test_values_and_gradients_match_autograd_of_the_formulas(shape, temperature):
    logits, targets = make(shape)
    g = torch.Generator().manual_seed(1)
    w_logp, w_ent = torch.randn(shape[:-1], generator=g), torch.randn(shape[:-1], generator=g)
    mine = grads(token_logprobs_and_entropy, logits, targets, temperature, w_logp, w_ent)
    theirs = grads(reference, logits.double(), targets, temperature, w_logp.double(), w_ent.double())
    for a, b in zip(mine, theirs):  # fp32 against fp64, on logits up to ~20: a few float32 ulps of the largest terms
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_logprobs_alone_match_and_leave_fp32_logits_untouched():
    logits, targets = make((4, 19, 33))
    before = logits.clone()
    torch.testing.assert_close(token_logprobs(logits, targets, 0.5).double(), reference(logits, targets, 0.5)[0],
                               rtol=1e-5, atol=1e-5)
    assert torch.equal(logits, before)  # the blocks' fp32 copies are scaled in place, never the caller's tensor


def test_bf16_view_of_the_model_output_as_the_trainer_passes_it():
    """logits[:, :-1] of a bf16 output (non-contiguous): values in fp32 and a bf16 gradient of the full shape."""
    out, _ = make((2, 18, 40), torch.bfloat16)
    targets = torch.randint(0, 40, (2, 17), generator=torch.Generator().manual_seed(2))
    x = out.clone().requires_grad_(True)
    logp, entropy = token_logprobs_and_entropy(x[:, :-1], targets, 0.7)
    assert logp.dtype == entropy.dtype == torch.float32
    logp.sum().backward()
    assert x.grad.dtype == torch.bfloat16 and x.grad[:, -1].abs().sum() == 0
    y = out.float().requires_grad_(True)
    reference(y[:, :-1], targets, 0.7)[0].sum().backward()
    torch.testing.assert_close(x.grad.float(), y.grad, rtol=1e-2, atol=1e-3)  # bf16 rounding of the gradient
    torch.testing.assert_close(logp.double(), reference(out[:, :-1], targets, 0.7)[0], rtol=1e-5, atol=1e-5)


def test_masked_vocabulary_entries_add_nothing_and_stay_finite():
    logits, targets = make((2, 9, 12))
    logits[..., :4] = float("-inf")  # masked entries; the targets are among the others
    targets = targets % 8 + 4
    mine = grads(token_logprobs_and_entropy, logits, targets, 0.7, torch.ones(2, 9), torch.ones(2, 9))
    unmasked = grads(token_logprobs_and_entropy, logits[..., 4:], targets - 4, 0.7, torch.ones(2, 9),
                     torch.ones(2, 9))
    assert all(torch.isfinite(t).all() for t in mine)
    for a, b in zip(mine, unmasked):  # sums over 12 and 8 terms: float32 rounding apart
        torch.testing.assert_close(a[..., 4:] if a.dim() == 3 else a, b, rtol=1e-5, atol=1e-5)
    assert mine[2][..., :4].abs().sum() == 0


def test_only_what_the_loss_uses_is_differentiated(monkeypatch):
    """A detached entropy (the metric) must not change the logprobs' gradient, and blocks are independent of their
    size: the same results with blocks of 1 and of 5 positions."""
    logits, targets = make((2, 11, 20))
    w = torch.randn(2, 11, generator=torch.Generator().manual_seed(3))
    full = grads(lambda x, t, T: (token_logprobs_and_entropy(x, t, T)[0], torch.zeros(())), logits, targets, 0.9,
                 w, 0.0)
    for chunk in (1, 5):
        monkeypatch.setattr(lp_module, "CHUNK", chunk)
        again = grads(lambda x, t, T: (lambda lp, h: (lp, h.detach()))(*token_logprobs_and_entropy(x, t, T)),
                      logits, targets, 0.9, w, torch.zeros(2, 11))
        torch.testing.assert_close(again[0], full[0])
        torch.testing.assert_close(again[2], full[2])
