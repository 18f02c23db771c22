"""Per-step prompt quotas per domain from `domain_interleave_probs`.

Exact each step (the counts sum to prompts_per_step) and exact in the long run: each domain carries the
fraction it was owed or over-served (its credit) into the next step, so p = 1/3 over 3 domains with 8 prompts a
step gives 3/3/2, then 3/2/3, then 2/3/3 - never a domain starved by rounding.
"""

from __future__ import annotations


def allocate_quotas(probs: dict[str, float], total: int, credit: dict[str, float] | None = None
                    ) -> tuple[dict[str, int], dict[str, float]]:
    """Returns (quotas, new_credit). Units go one at a time to the domain owed the most (ties: name order)."""
    credit = credit or {}
    want = {d: credit.get(d, 0.0) + p * total for d, p in probs.items()}
    quotas = {d: 0 for d in probs}
    for _ in range(total):
        d = max(sorted(probs), key=lambda name: (want[name] - quotas[name], probs[name] > 0))
        quotas[d] += 1
    return quotas, {d: want[d] - quotas[d] for d in probs}
