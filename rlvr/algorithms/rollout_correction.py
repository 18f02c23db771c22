"""The rollout-trainer mismatch: measured (`mismatch_metrics`) and corrected (`correction_weights`).

The engine that samples (vLLM, HF generate) and the trainer that learns never compute the same probabilities:
other kernels, batch shapes and precisions. With d_t = log pi_train(y_t) - log pi_rollout(y_t), the trainer's
logprob of a sampled token minus the engine's (both of the processed distribution, after temperature), over the
response tokens of a batch:

    kl            mean_t(-d_t)                 k1 estimate of KL(pi_rollout || pi_train) (samples from rollout)
    k3_kl         mean_t(exp(d_t) - 1 - d_t)   k3 estimate of the same KL (each term >= 0)
    *_log_ppl     mean_s(-mean_{t in s} log p)            per sequence, then over sequences
    *_ppl         mean_s(exp(-mean_{t in s} log p))
    log_ppl_diff  mean_s(training_log_ppl_s - rollout_log_ppl_s) = mean_s(-mean_{t in s} d_t), and its
                  max / min / mean absolute value over sequences
    ppl_ratio     mean_s(training_ppl_s / rollout_ppl_s)
    chi2_token    mean_t(exp(d_t)^2) - 1       chi-square of pi_train from pi_rollout, per token
    chi2_seq      mean_s(exp(sum_{t in s} d_t)^2) - 1     the same for whole sequences

Names and signs follow verl's rollout correction (`rollout_corr/*`): the log-ratio is trainer minus rollout, the
importance weight pi_train / pi_rollout. Where frameworks differ: slime logs the mismatch as |train - rollout|
logprob differences, and some write the ratio rollout over train; a positive `kl` here always means the
trainer finds the samples less likely than the engine did.

The correction weighs each token's policy-gradient term by an importance weight w and/or rejects tokens, at one
of three levels:

    token       log w_t = d_t
    geometric   log w_s = mean_{t in s} d_t   (the sequence's length-normalised ratio, its geometric mean)
    sequence    log w_s = sum_{t in s} d_t    (the product of the token ratios: unbiased, high variance)

Truncated IS (`is_level`): w = min(exp(log w), is_threshold), raised to `is_threshold_lower` when that is set.
Masked IS, i.e. rejection (`rs_level`): tokens (or whole sequences) whose ratio lies outside
[rs_threshold_lower, rs_threshold] leave the loss. Anchors: verl `rollout_is` / `rollout_rs`, slime's MIS,
ROLL `train_infer_correction`, ms-swift `rollout_importance_sampling_mode`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch

from rlvr.algorithms.policy_loss import _masked_mean

LEVELS = ("token", "geometric", "sequence")
_LOG_CLAMP = 20.0  # exp(+-20) ~ 5e8: a ratio beyond it is as good as infinite, and exp must not overflow


@dataclass(frozen=True)
class CorrectionSettings:
    is_level: str | None = None  # truncated importance weights: token | geometric | sequence | None (off)
    is_threshold: float = 2.0  # upper truncation of the weight
    is_threshold_lower: float | None = None  # weights below are raised to it (None: no floor)
    rs_level: str | None = None  # rejection (masked IS): token | geometric | sequence | None (off)
    rs_threshold: float = 2.0  # ratios above are rejected
    rs_threshold_lower: float | None = None  # ratios below are rejected (None: 1 / rs_threshold)

    @property
    def active(self) -> bool:
        return self.is_level is not None or self.rs_level is not None

    @classmethod
    def from_fields(cls, source: object) -> CorrectionSettings:
        """From any object with attributes of these names (the config's `algorithm.rollout_correction`)."""
        return cls(**{f.name: getattr(source, f.name) for f in fields(cls)})


def _per_sequence(d: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sum_t d, mean_t d, has tokens) per row."""
    n = mask.sum(dim=1)
    total = (d * mask).sum(dim=1)
    return total, total / n.clamp(min=1), n > 0


def log_ratio(train_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """d = train - rollout on the masked tokens (0 elsewhere), in fp32."""
    m = mask.to(torch.bool)
    return torch.where(m, train_logp.float() - rollout_logp.float(), torch.zeros((), dtype=torch.float32))


def mismatch_metrics(train_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """The `rollout_corr/*` statistics of one batch ([B, T] logprobs of the sampled tokens, mask of the response
    tokens that train). Empty when no token is in the mask."""
    m = mask.float()
    if m.sum() == 0:
        return {}
    d = log_ratio(train_logp, rollout_logp, m)
    rows = m.sum(dim=1) > 0
    train_lp = torch.where(m > 0, train_logp.float(), torch.zeros(()))
    rollout_lp = torch.where(m > 0, rollout_logp.float(), torch.zeros(()))
    _, train_mean, _ = _per_sequence(train_lp, m)
    _, rollout_mean, _ = _per_sequence(rollout_lp, m)
    seq_sum, seq_mean, _ = _per_sequence(d, m)
    train_log_ppl, rollout_log_ppl = -train_mean[rows], -rollout_mean[rows]
    diff = -seq_mean[rows]  # training_log_ppl_s - rollout_log_ppl_s
    ratio = torch.exp(d.clamp(-_LOG_CLAMP, _LOG_CLAMP))
    seq_ratio = torch.exp(seq_sum[rows].clamp(-_LOG_CLAMP, _LOG_CLAMP))
    out = {
        "kl": _masked_mean(-d, m),
        "k3_kl": _masked_mean(ratio - 1 - d, m),
        "training_log_ppl": train_log_ppl.mean(),
        "training_ppl": torch.exp(train_log_ppl).mean(),
        "rollout_log_ppl": rollout_log_ppl.mean(),
        "rollout_ppl": torch.exp(rollout_log_ppl).mean(),
        "log_ppl_diff": diff.mean(),
        "log_ppl_abs_diff": diff.abs().mean(),
        "log_ppl_diff_max": diff.max(),
        "log_ppl_diff_min": diff.min(),
        "ppl_ratio": torch.exp(diff).mean(),
        "chi2_token": _masked_mean(ratio**2, m) - 1,
        "chi2_seq": (seq_ratio**2).mean() - 1,
    }
    return {f"rollout_corr/{k}": float(v) for k, v in out.items()}


def level_log_weights(d: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """log w per token [B, T] for `level` (sequence levels broadcast the sequence's value to its tokens)."""
    if level == "token":
        return d
    if level not in LEVELS:
        raise ValueError(f"unknown rollout correction level {level!r}; valid: {', '.join(LEVELS)}")
    seq_sum, seq_mean, _ = _per_sequence(d, mask.float())
    per_seq = seq_sum if level == "sequence" else seq_mean
    return per_seq[:, None].expand_as(d)


def correction_weights(train_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor,
                       settings: CorrectionSettings) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """(weights [B, T], keep [B, T], stats). `weights` multiply each token's policy-gradient term (1 where IS is
    off; 0 off the mask); `keep` is the mask less the rejected tokens (the mask itself where RS is off). The
    caller decides whether rejected tokens leave the loss's denominator (they do by default: the loss averages
    over `keep`). Stats (`rollout_corr/*`): the applied weights' mean / min / max / std and effective sample size
    over the kept tokens (with IS off: of the raw token ratios pi_train / pi_rollout), the fraction of tokens
    whose weight was truncated (above, below), the fraction of tokens rejected and of sequences with a rejected
    token."""
    m = mask.to(torch.bool)
    d = log_ratio(train_logp, rollout_logp, m)
    keep = m.clone()
    stats: dict[str, torch.Tensor] = {}
    if settings.rs_level is not None:
        lower = settings.rs_threshold_lower if settings.rs_threshold_lower is not None else 1 / settings.rs_threshold
        log_w = level_log_weights(d, m, settings.rs_level)
        keep = m & (log_w <= math.log(settings.rs_threshold)) & (log_w >= math.log(lower))
        rejected = m & ~keep
        stats["rollout_rs_masked_fraction"] = rejected.sum() / m.sum().clamp(min=1)
        rows = m.any(dim=1)
        stats["rollout_rs_seq_masked_fraction"] = rejected.any(dim=1)[rows].float().mean() if rows.any() else \
            torch.zeros(())
    if settings.is_level is not None:
        log_w = level_log_weights(d, m, settings.is_level).clamp(-_LOG_CLAMP, _LOG_CLAMP)
        raw = torch.exp(log_w)
        w = raw.clamp(max=settings.is_threshold)
        if settings.is_threshold_lower is not None:
            w = w.clamp(min=settings.is_threshold_lower)
            stats["rollout_is_ratio_fraction_low"] = _masked_mean((raw < settings.is_threshold_lower).float(), keep)
        stats["rollout_is_ratio_fraction_high"] = _masked_mean((raw > settings.is_threshold).float(), keep)
    else:
        w = torch.exp(d.clamp(-_LOG_CLAMP, _LOG_CLAMP))  # described, not applied
    kept = w[keep]
    if kept.numel():
        stats.update({"rollout_is_mean": kept.mean(), "rollout_is_min": kept.min(), "rollout_is_max": kept.max(),
                      "rollout_is_std": kept.std(unbiased=False),
                      # (sum w)^2 / (n sum w^2) = 1 / mean((w / mean w)^2), in (0, 1]
                      "rollout_is_eff_sample_size": kept.sum() ** 2 / (kept.numel() * (kept**2).sum())})
    weights = torch.where(keep, w, torch.zeros_like(w)) if settings.is_level is not None else keep.float()
    return weights, keep.to(mask.dtype), {f"rollout_corr/{k}": float(v) for k, v in stats.items()}
