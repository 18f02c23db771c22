"""Per-token KL estimators between the policy and the reference model (Schulman, "Approximating KL
Divergence", 2020), usable as a reward penalty or as a loss term.

All kinds take log-probabilities of the *sampled* tokens under the current policy (`logp`) and the reference
(`ref_logp`), any equal shapes (usually [B, T]), and return a tensor of that shape. Masking and aggregation
are the caller's job (see `policy_loss.aggregate_loss`).
"""

from __future__ import annotations

import torch

__all__ = ["kl_penalty", "KL_KINDS"]

KL_KINDS: tuple[str, ...] = ("k1", "k2", "k3", "low_var_kl", "abs")


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi.

    With d = logp - ref_logp (log pi(x) - log pi_ref(x), x sampled from pi):

        "k1"         : d                                      unbiased, high variance, can be negative
        "k2"         : 0.5 * d^2                              biased, low variance, >= 0
        "k3"         : exp(-d) - (-d) - 1
                     = exp(ref - logp) - (ref - logp) - 1     unbiased, low variance, >= 0
        "low_var_kl" : clamp(k3, -10, 10), with (ref - logp) clamped to [-20, 20] before exp
                                                              (verl's form: bounded so one far-off-policy
                                                              token cannot dominate the loss or overflow)
        "abs"        : |d|

    Raises:
        ValueError: for an unknown `kind`; the message lists the valid ones.
    """
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp {tuple(logp.shape)} and ref_logp {tuple(ref_logp.shape)} must have the same shape")
    if kind == "k1":
        return logp - ref_logp
    if kind == "k2":
        return 0.5 * (logp - ref_logp).pow(2)
    if kind == "k3":
        neg_d = ref_logp - logp
        return torch.exp(neg_d) - neg_d - 1
    if kind == "low_var_kl":
        # Clamp the exponent first: exp(>~88) overflows float32 to inf, and inf - inf would give NaN.
        neg_d = torch.clamp(ref_logp - logp, min=-20.0, max=20.0)
        return torch.clamp(torch.exp(neg_d) - neg_d - 1, min=-10.0, max=10.0)
    if kind == "abs":
        return (logp - ref_logp).abs()
    raise ValueError(f"unknown KL kind {kind!r}; valid kinds: {', '.join(KL_KINDS)}")
