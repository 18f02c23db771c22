"""How the driver waits on its workers and reads the clock.

`RAY` is the real thing: Ray object refs and the wall clock. The simulator (rlvr/sim) hands the same driver code
a runtime of in-process workers on an asyncio loop whose clock is virtual, so that the real loop, scheduler and
reward agent run a step of the recipe's size in seconds. Only what the step loop needs goes through here.
"""

from __future__ import annotations

import time
from typing import Any

import ray


class RayRuntime:
    @staticmethod
    def get(refs: Any) -> Any:
        return ray.get(refs)

    @staticmethod
    def wait(refs: list, num_returns: int = 1) -> tuple[list, list]:
        return ray.wait(refs, num_returns=num_returns)

    @staticmethod
    def now() -> float:
        return time.perf_counter()


RAY = RayRuntime()
