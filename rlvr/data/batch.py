"""The training-side batch shared by every worker: padded tensors, one row per sample.

Layout (right padding): `input_ids[b] = prompt_ids + response_ids + pad`. Token-level tensors have T-1 columns and
are aligned with the *targets* `input_ids[:, 1:]`: column t holds what concerns the token at position t+1 (its
logprob, its advantage, whether it counts in the loss). `loss_mask` is 1 on response tokens of samples whose reward
is valid, so a failed reward never enters the loss; in a multi-turn sample only on the policy's own tokens
(`turn_index` >= 0), never on the environment's observation tokens (rlvr/data/turns.py has the multi-turn tensors).

Per-row tensors ([B]): `scores` (the reward, NaN where it failed), `valid` (the reward was computed), `group_index`
(rows with the same prompt group share it) and `domain_index` (position of the row's domain in the driver's domain
list). Advantages ([B, T-1], `advantages` and optionally `returns`) are added later by the driver, after the
forward passes (see rlvr/algorithms/advantages.py for the contract).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.data.turns import turn_tensors
from rlvr.data.types import Sample


@dataclass
class TrainBatch:
    tensors: dict[str, torch.Tensor]

    def __len__(self) -> int:
        return self.tensors["input_ids"].shape[0]

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.tensors[key]

    def get(self, key: str) -> torch.Tensor | None:
        return self.tensors.get(key)

    def with_tensor(self, key: str, value: torch.Tensor) -> "TrainBatch":
        return TrainBatch({**self.tensors, key: value})

    def select(self, index: torch.Tensor | slice) -> "TrainBatch":
        return TrainBatch({k: v[index] for k, v in self.tensors.items()})

    def split(self, size: int) -> list["TrainBatch"]:
        return [self.select(slice(i, i + size)) for i in range(0, len(self), size)]

    def trimmed(self) -> "TrainBatch":
        """Drop the padding columns that every row has, so a micro-batch of short rows costs less compute."""
        width = int(self.tensors["attention_mask"].sum(dim=1).max())
        out = {}
        for k, v in self.tensors.items():
            if v.dim() == 2 and k in SEQUENCE_KEYS:
                out[k] = v[:, :width]
            elif v.dim() == 2:
                out[k] = v[:, : width - 1]
            else:
                out[k] = v
        return TrainBatch(out)

    def first_loss_column(self) -> int:
        """The first target column that some row has in its loss: the columns before it (prompt tokens of every
        row) need no logits. 0 without a loss_mask (every position counts); the last column when no row is in the
        loss (nothing needs logits, but a forward needs one column)."""
        mask = self.tensors.get("loss_mask")
        if mask is None:
            return 0
        columns = mask.any(dim=0).nonzero()
        return int(columns[0]) if len(columns) else max(0, mask.shape[1] - 1)

    def from_column(self, start: int) -> "TrainBatch":
        """Target-aligned tensors from column `start` on; input_ids and attention_mask stay whole (the model reads
        the whole context). Pairs with logits computed from target column `start` on."""
        return TrainBatch({k: v[:, start:] if v.dim() == 2 and k not in SEQUENCE_KEYS else v
                           for k, v in self.tensors.items()})


# Tensors over the whole sequence (T columns); every other 2-D tensor is aligned with the targets (T-1 columns).
SEQUENCE_KEYS = ("input_ids", "attention_mask")


def in_loss(sample: Sample, mask_truncated: bool = False) -> bool:
    """A sample trains only if its reward is valid, and (optionally) if it was not cut at max_new_tokens."""
    return sample.scored_ok and not (mask_truncated and sample.finish_reason == "length")


def build_train_batch(samples: list[Sample], pad_id: int, mask_truncated: bool = False,
                      domains: list[str] | None = None) -> TrainBatch:
    """Pad samples into a TrainBatch (no advantages yet). `domains` orders `domain_index` (default: the order in
    which the samples' domains first appear)."""
    lengths = [len(s.prompt.prompt_ids) + len(s.response_ids) for s in samples]
    width = max(lengths)
    n = len(samples)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    loss_mask = torch.zeros((n, width - 1), dtype=torch.float32)
    for b, s in enumerate(samples):
        p, r = len(s.prompt.prompt_ids), len(s.response_ids)
        input_ids[b, : p + r] = torch.tensor(s.prompt.prompt_ids + s.response_ids, dtype=torch.long)
        attention_mask[b, : p + r] = 1
        if in_loss(s, mask_truncated):
            loss_mask[b, p - 1 : p + r - 1] = 1.0  # target positions p .. p+r-1 are the response tokens
    turns = turn_tensors(samples, width)
    if turns:
        loss_mask = loss_mask * (turns["turn_index"] >= 0)
    domains = list(domains) if domains is not None else list(dict.fromkeys(s.prompt.domain for s in samples))
    groups: dict[tuple[str, str], int] = {}
    tensors = {"input_ids": input_ids, "attention_mask": attention_mask, "loss_mask": loss_mask,
               "scores": torch.tensor([s.reward.reward if s.scored_ok else float("nan") for s in samples],
                                      dtype=torch.float32),
               "valid": torch.tensor([s.scored_ok for s in samples], dtype=torch.bool),
               "group_index": torch.tensor([groups.setdefault((s.prompt.domain, s.group_id), len(groups)) for s in samples],
                                           dtype=torch.long),
               "domain_index": torch.tensor([domains.index(s.prompt.domain) for s in samples], dtype=torch.long),
               **turns}
    if samples and all(s.logprobs is not None for s in samples):
        # The behaviour policy's logprob of each response token, aligned with the targets like loss_mask.
        behav = torch.zeros((n, width - 1), dtype=torch.float32)
        for b, s in enumerate(samples):
            p = len(s.prompt.prompt_ids)
            behav[b, p - 1 : p - 1 + len(s.logprobs)] = torch.tensor(s.logprobs, dtype=torch.float32)
        tensors["behav_logp"] = behav
    return TrainBatch(tensors)
