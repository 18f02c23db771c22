"""Multi-turn rows in the training batch: which agent turn each target token belongs to, and the per-turn episode
data GiGPO needs, laid out on the target-aligned token grid like every other [B, T-1] tensor (so they survive
trimming, splitting and row selection unchanged):

    turn_index   [B, T-1] long   turn k on the policy's tokens of turn k, -1 on observation / prompt / padding
                                 tokens; a single-turn response in a batch with episodes is all turn 0
    turn_reward  [B, T-1] float  the env's reward for turn k on the last token of turn k, 0 elsewhere
    state_id     [B, T-1] long   the anchor state (interned Env.state_key) turn k acted in, on every token of
                                 turn k; -1 elsewhere and on single-turn rows

rlvr/algorithms/gigpo.py::turns_from_tokens reads them back as per-turn [B, K] tensors.
"""

from __future__ import annotations

import torch

from rlvr.data.types import Sample

def turn_tensors(samples: list[Sample], width: int) -> dict[str, torch.Tensor]:
    """The three tensors above for rows of total length `width` (prompt + response + padding); {} when no sample
    is a multi-turn episode."""
    if not any(s.turn_index is not None for s in samples):
        return {}
    n = len(samples)
    turn_index = torch.full((n, width - 1), -1, dtype=torch.long)
    turn_reward = torch.zeros((n, width - 1), dtype=torch.float32)
    state_id = torch.full((n, width - 1), -1, dtype=torch.long)
    table: dict[str, int] = {}
    for b, s in enumerate(samples):
        p, r = len(s.prompt.prompt_ids), len(s.response_ids)
        turns = torch.tensor(s.turn_index if s.turn_index is not None else [0] * r, dtype=torch.long)
        turn_index[b, p - 1 : p - 1 + r] = turns
        if s.episode is None:
            continue
        for k, key in enumerate(s.episode.state_keys):
            cols = (turns == k).nonzero().squeeze(1) + p - 1
            if not len(cols):
                continue
            state_id[b, cols] = table.setdefault(key, len(table))
            if k < len(s.episode.rewards):
                turn_reward[b, cols[-1]] = s.episode.rewards[k]
    return {"turn_index": turn_index, "turn_reward": turn_reward, "state_id": state_id}

