"""Reward shaping applied to a sample's reward before advantages (pure functions)."""

from __future__ import annotations


def overlong_penalty(length: int, max_len: int, cache_len: int, factor: float = 1.0) -> float:
    """DAPO soft overlong punishment (arXiv 2503.14476, eq. 13), with L_max = max_len and L_cache = cache_len:

        0                                        if L <= L_max - L_cache
        ((L_max - L_cache) - L) / L_cache * f    if L_max - L_cache < L <= L_max
        -f                                       if L > L_max

    The penalty grows linearly over the last `cache_len` tokens, so the policy learns to finish earlier instead of
    being cut off (a truncated answer otherwise looks like any wrong answer).
    """
    if cache_len <= 0 or cache_len > max_len:
        raise ValueError(f"cache_len must be in (0, max_len={max_len}], got {cache_len}")
    threshold = max_len - cache_len
    if length <= threshold:
        return 0.0
    if length <= max_len:
        return (threshold - length) / cache_len * factor
    return -factor
