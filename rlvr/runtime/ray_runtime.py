"""How the driver waits on its workers and reads the clock.

`RAY` is the real thing: Ray object refs and the wall clock. The simulator (rlvr/sim) hands the same driver code
a runtime of in-process workers on an asyncio loop whose clock is virtual (rlvr/sim/clock.py: SimRuntime), so that
the real loop, scheduler and reward agent run a step of the recipe's size in seconds. Only what the driver needs
goes through here; the driver's `Waiter` (rlvr/runtime/waiter.py) is built on it, so its deadlines and its
supervision ticks run in the runtime's time.

A runtime has:
    get(refs)                                   results of one ref or a list of refs (a call's error is raised)
    wait(refs, num_returns=1, timeout=None)     (ready, not ready), as `ray.wait`: at most `timeout` seconds
    is_ref(x)                                   x is one ref (not a list of them)
    put(obj)                                    a ref to obj that any worker can take as an argument
    now()                                       the clock (seconds, monotonic)
    sleep(seconds)                              the driver pauses; the workers go on
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
    def wait(refs: list, num_returns: int = 1, timeout: float | None = None) -> tuple[list, list]:
        return ray.wait(refs, num_returns=num_returns, timeout=timeout)

    @staticmethod
    def is_ref(x: Any) -> bool:
        return isinstance(x, ray.ObjectRef)

    @staticmethod
    def put(obj: Any) -> ray.ObjectRef:
        return ray.put(obj)

    @staticmethod
    def now() -> float:
        return time.perf_counter()

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(seconds)


RAY = RayRuntime()
