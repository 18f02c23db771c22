"""Per-domain metrics of multi-turn episodes, next to sample_metrics' reward / length / status ones."""

from __future__ import annotations

from collections import Counter

import numpy as np

from rlvr.data.types import Sample

FINISHES = ("done", "max_turns", "token_budget", "env_error", "env_timeout", "env_invalid")


def episode_metrics(prefix: str, samples: list[Sample]) -> dict[str, float]:
    """Under `prefix` (e.g. 'grid/' or 'val/grid/'): success rate, turns, episode length in tokens (prompt
    excluded; policy and observation tokens apart), invalid action rate, finish reasons, env time."""
    episodes = [s for s in samples if s.episode is not None]
    if not episodes:
        return {}
    p = f"{prefix}episode/"
    turns = [s.episode.turns for s in episodes]
    actions = sum(turns)
    policy_tokens = [sum(t >= 0 for t in (s.turn_index or [])) for s in episodes]
    out = {
        f"{p}success/mean": float(np.mean([s.episode.success for s in episodes])),
        f"{p}turns/mean": float(np.mean(turns)),
        f"{p}turns/max": float(max(turns)),
        f"{p}length/mean": float(np.mean([len(s.response_ids) for s in episodes])),
        f"{p}policy_tokens/mean": float(np.mean(policy_tokens)),
        f"{p}observation_tokens/mean": float(np.mean([len(s.response_ids) - n
                                                      for s, n in zip(episodes, policy_tokens)])),
        f"{p}invalid_action_rate": sum(s.episode.invalid_actions for s in episodes) / actions if actions else 0.0,
        f"{p}env_time_s/mean": float(np.mean([s.episode.env_time_s for s in episodes])),
    }
    finishes = Counter(s.episode.finish for s in episodes)
    out.update({f"{p}finish/{f}": float(finishes.get(f, 0)) for f in FINISHES})
    return out
