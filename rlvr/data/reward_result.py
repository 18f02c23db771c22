"""The one result type every reward returns (DESIGN.md, Rewards)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

Status = Literal["ok", "error", "timeout", "invalid"]
STATUSES: tuple[Status, ...] = ("ok", "error", "timeout", "invalid")


@dataclass
class RewardResult:
    """reward: the scalar used for training; correct: feeds val_correct (None when the notion does not apply).

    status != "ok" means the reward could not be computed: the sample is masked out of the loss and counted
    under `<domain>/reward/status/<status>`; its `reward` is NaN so that an accidental use shows up at once.
    """

    reward: float
    correct: bool | None = None
    status: Status = "ok"
    parts: dict[str, float] = field(default_factory=dict)
    latency_s: float = 0.0
    info: str = ""

    @classmethod
    def failed(cls, status: Status, info: str, latency_s: float = 0.0) -> "RewardResult":
        if status == "ok":
            raise ValueError("failed() needs a failure status")
        return cls(reward=math.nan, correct=None, status=status, latency_s=latency_s, info=info[:500])
