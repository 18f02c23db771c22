"""Virtual time for asyncio, and the driver's runtime over in-process workers (simulation only).

`VirtualClockLoop` is an ordinary asyncio event loop whose clock jumps to the next timer whenever no task is
ready to run: `await asyncio.sleep(40)` takes no wall time and 40 s of loop time, and everything that reads
`loop.time()` (reward deadlines, latencies, the reward span, the driver's phase timer) sees simulated seconds.
Nothing in such a loop may wait on real I/O or threads: when no task is ready and no timer is pending, the
simulation is deadlocked, and `SimulationDeadlock` says so instead of hanging.

`SimRuntime` is what the driver's `Waiter` (and so RLVRPipeline, Rollout, DomainSchedulers and Cluster) calls
instead of Ray (rlvr/runtime/ray_runtime.py): `get` and `wait` run the loop until what they wait for is done (or, for
`wait`, until its timeout in simulated seconds: the waiter's deadlines and supervision slices are simulated
time), and the loop stands still (no simulated time passes) while the driver runs its own code between two waits.
`SimActor` stands for a Ray actor handle: `handle.method.remote(...)` starts the method as a task on the loop and
returns the task as the "ref" (`is_ref`; `put` hands the object itself to the in-process workers)."""

from __future__ import annotations

import asyncio
import inspect
import selectors
from typing import Any


class SimulationDeadlock(RuntimeError):
    """Every task waits and no timer is pending: in real time the run would hang here."""


class _JumpingSelector(selectors.SelectSelector):
    """select() never blocks: it moves the clock to the loop's next timer (the timeout the loop asks for)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list:
        if timeout is None:
            raise SimulationDeadlock("no task can run and no timer is pending: the run would hang here")
        self.now += timeout
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._jumping = _JumpingSelector()
        super().__init__(selector=self._jumping)

    def time(self) -> float:
        return self._jumping.now


class SimRuntime:
    """The driver's side of the simulation: waits run the virtual-time loop, `now` reads its clock."""

    def __init__(self, loop: VirtualClockLoop | None = None) -> None:
        self.loop = loop or VirtualClockLoop()

    def now(self) -> float:
        return self.loop.time()

    def get(self, refs: Any) -> Any:
        if isinstance(refs, list):
            async def every() -> list:
                return [await r for r in refs]
            return self.loop.run_until_complete(every())
        return self.loop.run_until_complete(refs)

    def wait(self, refs: list, num_returns: int = 1, timeout: float | None = None) -> tuple[list, list]:
        """As ray.wait: the first `num_returns` done refs (in the order given) and the rest; with a timeout, what
        is done after that many simulated seconds (possibly fewer than `num_returns`)."""
        loop = self.loop

        async def enough() -> None:
            end = None if timeout is None else loop.time() + timeout
            while sum(r.done() for r in refs) < num_returns:
                left = None if end is None else end - loop.time()
                if left is not None and left <= 0:
                    return
                await asyncio.wait([r for r in refs if not r.done()], timeout=left,
                                   return_when=asyncio.FIRST_COMPLETED)

        self.loop.run_until_complete(enough())
        ready = [r for r in refs if r.done()][:num_returns]
        return ready, [r for r in refs if all(r is not x for x in ready)]

    @staticmethod
    def is_ref(x: Any) -> bool:
        return isinstance(x, asyncio.Future)  # a SimActor call's task

    @staticmethod
    def put(obj: Any) -> Any:
        return obj  # in-process workers take the object itself

    def sleep(self, seconds: float) -> None:
        """The driver pauses for `seconds` of simulated time; the workers go on meanwhile."""
        self.loop.run_until_complete(asyncio.sleep(seconds))

    def actor(self, obj: Any) -> "SimActor":
        return SimActor(obj, self.loop)

    def close(self) -> None:
        """Cancels what is still running (background reward calls of an unfinished step) and closes the loop."""
        tasks = asyncio.all_tasks(self.loop)
        for task in tasks:
            task.cancel()
        if tasks:
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.loop.close()


class SimActor:
    """A Ray actor handle's shape around a local object: `handle.method.remote(*args)` -> a task on the loop."""

    def __init__(self, obj: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._obj = obj
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._obj, name)
        loop = self._loop

        class _Method:
            @staticmethod
            def remote(*args: Any, **kwargs: Any) -> asyncio.Task:
                return loop.create_task(_call(method, args, kwargs))

        return _Method


async def _call(method, args, kwargs) -> Any:
    result = method(*args, **kwargs)
    return await result if inspect.isawaitable(result) else result
