"""Group filters for dynamic sampling (DAPO): which finished groups are kept for training, and why not.

A filter returns None to keep a group, or the reason it is dropped; reasons become the counters
`<domain>/filter/dropped_<reason>`.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Callable

from rlvr.data.types import Group

UserFilter = Callable[[Group], "bool | str | None"]


@dataclass(frozen=True)
class FilterSettings:
    zero_spread: bool = False  # drop groups whose rewards do not vary: their GRPO advantages are all 0
    zero_spread_threshold: float = 0.0  # "no spread" means std <= this
    metric: str = "reward"  # "reward" or "correct": what the spread and the band are measured on
    mean_band: tuple[float, float] | None = None  # keep only groups whose mean lies in [low, high]
    min_valid: int = 2  # fewer valid (scored ok) samples than this: nothing to compare inside the group
    user_fn: str | None = None  # import path of fn(group) -> True/None (keep) | False/str (drop, str = reason)


def group_values(group: Group, metric: str) -> list[float]:
    if metric == "correct":
        return [float(bool(s.reward.correct)) for s in group.samples if s.scored_ok]
    return [s.reward.reward for s in group.samples if s.scored_ok]


def population_std(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def load_user_filter(path: str | None) -> UserFilter | None:
    if not path:
        return None
    module, _, name = path.rpartition(".")
    fn = getattr(importlib.import_module(module), name)
    if not callable(fn):
        raise TypeError(f"rollout.filter.user_fn: '{path}' is not callable")
    return fn


def drop_reason(group: Group, settings: FilterSettings, user_fn: UserFilter | None = None) -> str | None:
    """None if the group is kept, else why it is dropped (the first failing filter)."""
    values = group_values(group, settings.metric)
    if len(values) < settings.min_valid:
        return "too_few_valid"
    if settings.zero_spread and population_std(values) <= settings.zero_spread_threshold:
        correct = [s.reward.correct for s in group.samples if s.scored_ok]
        if all(c is True for c in correct):
            return "all_correct"
        if all(c is False for c in correct):
            return "all_wrong"
        return "zero_spread"
    if settings.mean_band is not None:
        low, high = settings.mean_band
        if not low <= sum(values) / len(values) <= high:
            return "band"
    if user_fn is not None:
        verdict = user_fn(group)
        if verdict is False:
            return "user"
        if isinstance(verdict, str):
            return f"user_{verdict}"
    return None
