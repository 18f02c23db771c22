"""One step's collection inside a DynamicSamplingScheduler: its counters, the groups it kept, the carried-over
groups it took, its generation barrier and its phase times. With one-step off-policy training two steps'
collections overlap, so none of this lives on the scheduler itself."""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from dataclasses import dataclass, field

from rlvr.data.types import Group


@dataclass
class Carried:
    group: Group
    born_step: int  # the step whose policy generated it


@dataclass
class StepRun:
    """One step's collection. With one-step off-policy training two of them overlap, so nothing of a step
    lives on the scheduler itself: counters, kept groups and the generation barrier are here."""

    step: int
    n_groups: int
    counters: Counter
    cursor: tuple[int, int]  # the data cursor before this step took its prompts (what a checkpoint saves)
    launched: int = 0  # prompts launched for this step (names its requests)
    kept: list[Group] = field(default_factory=list)
    carried: list[Carried] = field(default_factory=list)
    ready: asyncio.Queue = field(default_factory=asyncio.Queue)  # kept groups, then metrics (or an error)
    generated: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    _initial_left: int = 0
    _reward_times: list[float] = field(default_factory=lambda: [math.inf, -math.inf])
    _started: float = field(default_factory=lambda: asyncio.get_running_loop().time())
    _generate_span: float = 0.0

    def keep(self, group: Group) -> None:
        self.kept.append(group)
        self.ready.put_nowait(group)

    def expect_initial(self, count: int) -> None:
        self._initial_left = count
        if count == 0:
            self.mark_generated()

    def initial_generated(self) -> None:
        self._initial_left -= 1
        if self._initial_left <= 0:
            self.mark_generated()

    def mark_generated(self) -> None:
        """The step's initial generation is over (or nothing more of it will generate)."""
        if not self.generated.is_set():
            self._generate_span = asyncio.get_running_loop().time() - self._started
        self.generated.set()

    def reward_sent(self) -> None:
        self._reward_times[0] = min(self._reward_times[0], asyncio.get_running_loop().time())

    def reward_landed(self) -> None:
        self._reward_times[1] = max(self._reward_times[1], asyncio.get_running_loop().time())

    def generate_span(self) -> float:
        """Seconds from the step's start to the end of its initial generation (0 while it goes on)."""
        return self._generate_span

    def reward_span(self) -> float:
        """Seconds from this step's first reward request to its last result (0 when none was sent)."""
        first, last = self._reward_times
        return max(0.0, last - first) if math.isfinite(first) and math.isfinite(last) else 0.0
