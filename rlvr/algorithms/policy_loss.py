"""Clipped policy-gradient loss, loss aggregation over tokens and sequences, and token entropy.

Token-level tensors are [B, T]; `mask` [B, T] (bool or float) is 1 on the response tokens that count.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

__all__ = ["ppo_clip_loss", "gspo_loss", "topr_loss", "behaviour_weights", "aggregate_loss", "entropy_from_logits",
           "LOSS_AGG_MODES"]

LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)

Number = Union[int, float, torch.Tensor]


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum(x * mask) / sum(mask), 0 when the mask is empty (rather than NaN)."""
    m = mask.to(x.dtype)
    total = m.sum()
    return torch.where(total > 0, (x * m).sum() / torch.where(total > 0, total, torch.ones_like(total)),
                       torch.zeros_like(total))


def ppo_clip_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: Optional[float] = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate per token, with asymmetric clip (DAPO "clip-higher") and optional dual clip.

        ratio = exp(clamp(logp - old_logp, -20, 20))
        L     = max( -A * ratio,  -A * clip(ratio, 1 - clip_low, 1 + clip_high) )
        if dual_clip_c is set (c > 1) and A < 0:                (Ye et al., arXiv 1912.09729)
        L     = min( L, -A * c )

    The max is the pessimistic bound: the clip only ever removes incentive to move the ratio further from 1,
    never adds it. A larger `clip_high` (e.g. 0.28, DAPO arXiv 2503.14476) lets low-probability tokens with
    A > 0 grow more, which counters entropy collapse. With A < 0 and a huge ratio the clipped surrogate is
    unbounded (-A * ratio); the dual clip caps it at -A * c so that stale, far-off-policy tokens cannot
    dominate the update. The log-ratio is clamped to [-20, 20] before exp so that a garbage log-prob cannot
    overflow to inf (and then NaN through the gradient).

    Args:
        logp: [B, T] log-probs of the sampled tokens under the policy being trained (carries the gradient).
        old_logp: [B, T] log-probs under the behaviour policy that produced the samples (no gradient needed).
        advantages: [B, T] token advantages.
        mask: [B, T] 1 on response tokens that count.
        clip_low, clip_high: clip range [1 - clip_low, 1 + clip_high].
        dual_clip_c: dual-clip constant (> 1), or None to disable.

    Returns:
        per_token_loss [B, T] (0 where mask is 0; aggregate with `aggregate_loss`), and stats, 0-dim detached
        tensors over the masked tokens:
            clipfrac:      fraction where the clipped term is the one selected (clip active)
            dual_clipfrac: fraction where the dual clip is active (0 when disabled)
            approx_kl:     mean(old_logp - logp), the k1 estimate of KL(old || new)
            ratio_mean:    mean(ratio)
    """
    if not (logp.shape == old_logp.shape == advantages.shape == mask.shape):
        raise ValueError(
            "logp, old_logp, advantages and mask must share a shape, got "
            f"{tuple(logp.shape)}, {tuple(old_logp.shape)}, {tuple(advantages.shape)}, {tuple(mask.shape)}"
        )
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"clip_low and clip_high must be >= 0, got {clip_low}, {clip_high}")
    if dual_clip_c is not None and dual_clip_c <= 1.0:
        raise ValueError(f"dual_clip_c must be > 1, got {dual_clip_c}")

    log_ratio = torch.clamp(logp - old_logp, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    pg_unclipped = -advantages * ratio
    pg_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(pg_unclipped, pg_clipped)
    clip_active = pg_clipped > pg_unclipped

    if dual_clip_c is not None:
        pg_dual = -advantages * dual_clip_c
        dual_active = (advantages < 0) & (pg_dual < loss)
        loss = torch.where(advantages < 0, torch.minimum(loss, pg_dual), loss)
    else:
        dual_active = torch.zeros_like(clip_active)

    keep = mask.to(torch.bool)
    # where, not multiply: a NaN/inf at a padding position must not survive as NaN * 0.
    loss = torch.where(keep, loss, torch.zeros_like(loss))

    with torch.no_grad():
        stats = {
            "clipfrac": _masked_mean(clip_active.to(logp.dtype), mask),
            "dual_clipfrac": _masked_mean(dual_active.to(logp.dtype), mask),
            "approx_kl": _masked_mean((old_logp - logp).detach(), mask),
            "ratio_mean": _masked_mean(ratio.detach(), mask),
        }
    return loss, stats


def _check_shapes(logp, old_logp, advantages, mask) -> None:
    if not (logp.shape == old_logp.shape == advantages.shape == mask.shape) or logp.dim() != 2:
        raise ValueError(
            "logp, old_logp, advantages and mask must share a [B, T] shape, got "
            f"{tuple(logp.shape)}, {tuple(old_logp.shape)}, {tuple(advantages.shape)}, {tuple(mask.shape)}"
        )


def _sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum over the row's loss tokens of (logp - old_logp), detached: log pi(y|x) / pi_old(y|x). [B]"""
    keep = mask.to(torch.bool)
    return torch.where(keep, (logp - old_logp).detach(), torch.zeros_like(logp)).sum(dim=-1)


def gspo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO (Zheng et al., arXiv 2507.18071): PPO's clipped surrogate on a sequence-level importance ratio.

        s_i     = (pi(y_i|x) / pi_old(y_i|x)) ^ (1/|y_i|) = exp( mean_t (logp - old_logp) )   (length-normalised)
        s_i,t   = sg[s_i] * pi(y_i,t) / sg[pi(y_i,t)]          (value s_i; gradient s_i * grad log pi(y_i,t))
        L_i,t   = max( -A * s_i,t,  -A * clip(s_i,t, 1 - clip_low, 1 + clip_high) )

    Every token of a sequence shares the ratio and so the clip decision: a sequence is kept or clipped as a whole,
    which is what makes GSPO robust to the token-level ratio noise of long responses (and of MoE routing).
    Aggregated with seq-mean-token-mean, the gradient is the paper's: (1/G) sum_i s_i A_i (1/|y_i|) sum_t grad
    log pi(y_i,t). The paper's clip range is tiny (3e-4 / 4e-4) because s_i is a per-token geometric mean. With
    A broadcast per sequence this is the paper's GSPO; a token-level A gives its "GSPO-token" variant. The
    log-ratio is capped at 10 before exp (verl's guard).

    Returns:
        per-token loss [B, T] (0 off the mask) and stats over the masked tokens: clipfrac (tokens of clipped
        sequences), approx_kl (k1 of old vs new), ratio_mean (mean sequence ratio, token-weighted).
    """
    _check_shapes(logp, old_logp, advantages, mask)
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"clip_low and clip_high must be >= 0, got {clip_low}, {clip_high}")
    keep = mask.to(torch.bool)
    lengths = keep.sum(dim=-1).clamp(min=1)
    seq_log_ratio = _sequence_log_ratio(logp, old_logp, mask) / lengths
    log_ratio = torch.clamp(logp - logp.detach() + seq_log_ratio[:, None], max=10.0)
    ratio = torch.exp(log_ratio)
    pg_unclipped = -advantages * ratio
    pg_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.where(keep, torch.maximum(pg_unclipped, pg_clipped), torch.zeros_like(logp))
    with torch.no_grad():
        stats = {"clipfrac": _masked_mean((pg_clipped > pg_unclipped).to(logp.dtype), mask),
                 "approx_kl": _masked_mean((old_logp - logp).detach(), mask),
                 "ratio_mean": _masked_mean(ratio.detach(), mask)}
    return loss, stats


def topr_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    positive_weight: float = 1.0,
    negative_weight: float = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """TOPR, Tapered Off-Policy REINFORCE (Le Roux et al., arXiv 2503.14286, eq. 8):

        grad J = sum_{A >= 0} mu(y) A grad log pi(y)  +  sum_{A < 0} mu(y) [pi(y)/mu(y)]_0^1 A grad log pi(y)
        L_t    = -sg(w) * A_t * logp_t,   w = positive_weight                          where A_t >= 0
                                          w = negative_weight * min(1, pi(y)/mu(y))     where A_t < 0

    mu is the policy that generated the samples (old_logp) and pi(y)/mu(y) is the ratio of whole sequences
    (exp of the summed token log-ratios), truncated to [0, 1]. Positive samples get the plain (SFT-like) REINFORCE
    gradient however unlikely they have become; negative ones are tapered as pi moves away from them, so pushing
    down a sequence pi no longer produces stops, the instability of off-policy REINFORCE with negative rewards.
    On-policy (pi = mu) the gradient is REINFORCE's. With 0/1 rewards the sign comes from the baseline (the
    paper's c; adv_estimator reinforce's batch mean, or algorithm.reward_processing.reward_shift).

    Returns:
        per-token loss [B, T] (0 off the mask) and stats over the masked tokens: positive_frac, truncated_frac
        (negative tokens whose sequence ratio is below 1, i.e. tapered), ratio_mean (the truncated ratio over the
        negative tokens' sequences, token-weighted; 1 when there are none).
    """
    _check_shapes(logp, old_logp, advantages, mask)
    keep = mask.to(torch.bool)
    seq_ratio = torch.exp(torch.clamp(_sequence_log_ratio(logp, old_logp, mask), max=0.0))  # min(1, pi/mu)
    positive = advantages >= 0
    weights = torch.where(positive, torch.full_like(logp, positive_weight),
                          negative_weight * seq_ratio[:, None].expand_as(logp)).detach()
    loss = torch.where(keep, -weights * advantages * logp, torch.zeros_like(logp))
    with torch.no_grad():
        negative = keep & ~positive
        ratio_tok = seq_ratio[:, None].expand_as(logp).to(logp.dtype)
        stats = {"positive_frac": _masked_mean(positive.to(logp.dtype), mask),
                 "truncated_frac": _masked_mean((ratio_tok < 1).to(logp.dtype), negative),
                 "ratio_mean": torch.where(negative.any(), _masked_mean(ratio_tok, negative),
                                           torch.ones((), dtype=logp.dtype, device=logp.device)),
                 "approx_kl": _masked_mean((old_logp - logp).detach(), mask)}
    return loss, stats


def behaviour_weights(
    prox_logp: torch.Tensor,
    behav_logp: torch.Tensor,
    mask: torch.Tensor,
    cap: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token importance weights of the decoupled PPO loss (AReaL, arXiv 2505.24298):

        w = min( exp(prox_logp - behav_logp), cap )

    The clipped surrogate is taken around the proximal policy (a recent policy whose logprobs the trainer
    can compute, here its weights before this update), and `w` corrects for the data having been generated
    by an older behaviour policy. Capping w bounds the variance a very stale token can add (AReaL masks
    such tokens instead; a cap keeps their gradient, bounded). No gradient flows through w.

    Returns:
        weights [B, T] (0 where mask is 0), and stats over the masked tokens: behav_weight_mean, and
        behav_weight_capped_frac (fraction of tokens whose weight hit the cap).
    """
    if cap <= 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    with torch.no_grad():
        raw = torch.exp(torch.clamp(prox_logp - behav_logp, min=-20.0, max=20.0))
        weights = torch.where(mask.to(torch.bool), torch.clamp(raw, max=cap), torch.zeros_like(raw))
        stats = {"behav_weight_mean": _masked_mean(weights, mask),
                 "behav_weight_capped_frac": _masked_mean((raw > cap).to(raw.dtype), mask)}
    return weights, stats


def _safe_div(num: torch.Tensor, den: Number) -> torch.Tensor:
    """num / den, or 0 when den is 0 (an empty micro-batch must give loss 0, not NaN)."""
    den_t = torch.as_tensor(den, device=num.device).to(num.dtype)
    nonzero = den_t != 0
    return torch.where(nonzero, num / torch.where(nonzero, den_t, torch.ones_like(den_t)), torch.zeros_like(num))


def aggregate_loss(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    *,
    n_tokens_global: Optional[Number] = None,
    n_seqs_global: Optional[Number] = None,
    max_response_len: Optional[int] = None,
) -> torch.Tensor:
    """Reduce a [B, T] per-token loss to a scalar.

    With m = mask, s_b = sum_t L[b,t] m[b,t], l_b = sum_t m[b,t]:

        "token-mean"               : sum_b s_b / N_tok              N_tok  default sum(m)
        "seq-mean-token-sum"       : sum_b s_b / N_seq              N_seq  default #{b : l_b > 0}
        "seq-mean-token-mean"      : sum_b (s_b / l_b) / N_seq      (a sequence with l_b = 0 adds 0)
        "seq-mean-token-sum-norm"  : sum_b (s_b / max_response_len) / N_seq      (Dr.GRPO, arXiv 2503.20783)

    Why the global counts: the defaults normalise by what is in *this* call. When a mini-batch is split
    into micro-batches (gradient accumulation) or across data-parallel ranks, each part would then be
    averaged by its own size, and the parts' sum would weight tokens of short parts more. Passing the count
    of the whole mini-batch (n_tokens_global / n_seqs_global) makes every part a share of one global sum,
    so summing (accumulating) the parts' losses and gradients gives exactly the full-batch update.

    token-mean weights every token equally (long responses count more; DAPO's choice). seq-mean-token-mean
    weights every sequence equally (each token of a long response counts less: GRPO's original length
    bias). seq-mean-token-sum-norm divides by a constant, so there is no length bias at all; that constant
    must be the configured maximum response length, not the padded width of a micro-batch (which varies),
    so it has no default.

    Raises:
        ValueError: unknown mode (the message lists LOSS_AGG_MODES), missing max_response_len, bad shapes.
    """
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; valid modes: {', '.join(LOSS_AGG_MODES)}")
    if per_token.shape != mask.shape or per_token.dim() != 2:
        raise ValueError(f"per_token and mask must both be [B, T], got {tuple(per_token.shape)}, {tuple(mask.shape)}")

    # Sums and counts in at least float32: in bfloat16 a count like 100000 is not representable (-> 99840).
    acc_dtype = torch.promote_types(per_token.dtype, torch.float32)
    m = mask.to(acc_dtype)
    # where, not multiply, so that NaN/inf at masked-out positions cannot leak into the sum.
    masked = torch.where(mask.to(torch.bool), per_token.to(acc_dtype), torch.zeros((), dtype=acc_dtype,
                                                                                     device=per_token.device))
    seq_sum = masked.sum(dim=-1)  # [B]
    seq_len = m.sum(dim=-1)  # [B]

    if mode == "token-mean":
        n_tok = seq_len.sum() if n_tokens_global is None else n_tokens_global
        return _safe_div(seq_sum.sum(), n_tok).to(per_token.dtype)

    n_seq = (seq_len > 0).sum() if n_seqs_global is None else n_seqs_global
    if mode == "seq-mean-token-sum":
        per_seq = seq_sum
    elif mode == "seq-mean-token-mean":
        per_seq = torch.where(seq_len > 0, seq_sum / torch.where(seq_len > 0, seq_len, torch.ones_like(seq_len)),
                              torch.zeros_like(seq_sum))
    else:  # seq-mean-token-sum-norm
        if max_response_len is None or max_response_len <= 0:
            raise ValueError(
                "loss aggregation 'seq-mean-token-sum-norm' needs max_response_len > 0 (the configured "
                f"maximum response length, a constant across micro-batches), got {max_response_len!r}"
            )
        per_seq = seq_sum / max_response_len
    return _safe_div(per_seq.sum(), n_seq).to(per_token.dtype)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax distribution at each position: [B, T, V] -> [B, T].

        H = -sum_v p_v log p_v,  with log p_v = z_v - logsumexp(z)
          = logsumexp(z) - sum_v p_v z_v

    The logsumexp form never materialises log p (no log(0) = -inf for vanishing probabilities) and is
    shift-invariant, so large logits do not overflow. Logits of -inf (masked vocabulary entries) are
    allowed: they get p = 0 and are replaced by 0 inside the sum, avoiding 0 * -inf = NaN in the value
    and in the gradient.

    Computed in the dtype of `logits`; pass float32 logits for accurate entropies (in bfloat16 the
    difference of two large terms loses most of its digits).
    """
    probs = torch.softmax(logits, dim=-1)
    finite_logits = logits.masked_fill(torch.isneginf(logits), 0.0)
    return torch.logsumexp(logits, dim=-1) - (probs * finite_logits).sum(dim=-1)
