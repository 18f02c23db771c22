"""Groups of scored samples -> one TrainBatch (advantages come later: rlvr/pipeline/advantage_step.py)."""

from __future__ import annotations

import numpy as np
import torch

from rlvr.data.batch import TrainBatch, build_train_batch, in_loss
from rlvr.data.types import Group, Sample


def make_train_batch(groups_by_domain: dict[str, list[Group]], domains: list[str], pad_id: int, seed: int,
                     mask_truncated: bool = False) -> tuple[TrainBatch, list[Sample], dict[str, float]]:
    """Every sample becomes a row (scores, valid, group and domain index included; no advantages yet).

    Rows are shuffled with a seeded generator so that mini-batches mix domains; groups need no contiguity (the
    estimators find them by `group_index`).
    """
    samples = [s for gs in groups_by_domain.values() for g in gs for s in g.samples]
    metrics: dict[str, float] = {}
    for domain, groups in groups_by_domain.items():
        if groups:
            metrics[f"{domain}/groups/with_signal_frac"] = sum(map(_has_signal, groups)) / len(groups)
    order = np.random.default_rng(seed).permutation(len(samples))
    samples = [samples[i] for i in order]
    batch = build_train_batch(samples, pad_id, mask_truncated, domains)
    masked = sum(not in_loss(s, mask_truncated) for s in samples)
    sizes = {len(g.samples) for gs in groups_by_domain.values() for g in gs}
    metrics.update({"batch/groups": float(sum(len(gs) for gs in groups_by_domain.values())),
                    "batch/group_size/min": float(min(sizes)), "batch/group_size/max": float(max(sizes)),
                    "batch/samples": float(len(samples)), "batch/masked_samples": float(masked),
                    "batch/masked_truncated": float(sum(s.scored_ok and not in_loss(s, mask_truncated)
                                                        for s in samples)),
                    "batch/response_tokens": float(batch["loss_mask"].sum())})
    return batch, samples, metrics


def _has_signal(group: Group) -> bool:
    """Every reward in and not all equal: the group can move the policy."""
    if not all(s.scored_ok for s in group.samples):
        return False
    return len({s.reward.reward for s in group.samples}) > 1
