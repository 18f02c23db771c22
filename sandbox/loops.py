"""Running the sandbox from whatever event loop calls it: a Ray async actor's uvloop, plain sync code, or several
loops in several threads sharing one limit on parallel runs."""

from __future__ import annotations

import asyncio
import threading
from collections import deque


def run_on_stock_loop(coro):
    """Runs a coroutine on a new stock asyncio loop in this thread. The process's loop policy is uvloop's in a Ray
    async actor: asyncio.run would make a uvloop loop again (and the run would come back here, thread after
    thread, until the process is out of file descriptors), and a stock loop under that policy has no child
    watcher for its subprocesses. So the policy becomes the stock one, once, for the whole process; loops
    already running (the actor's) keep running."""
    if type(asyncio.get_event_loop_policy()) is not asyncio.DefaultEventLoopPolicy:
        asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    return asyncio.run(coro)


def run_blocking(coro):
    """Runs a coroutine to completion from sync code, even when this thread already has a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    result: list = []

    def target():
        result.append(asyncio.run(coro))

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    return result[0]


class CrossLoopLimiter:
    """A counting semaphore usable from any event loop in any thread (asyncio.Semaphore is bound to one loop).
    FIFO: a released slot goes to the longest waiter."""

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._lock = threading.Lock()
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = deque()

    async def __aenter__(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return
            future = loop.create_future()
            self._waiters.append((loop, future))
        try:
            await future
        except BaseException:
            with self._lock:
                if (loop, future) in self._waiters:
                    self._waiters.remove((loop, future))
                    raise
            # The slot was handed to us while we were being cancelled: pass it on.
            self._release()
            raise

    async def __aexit__(self, *exc) -> None:
        self._release()

    def _release(self) -> None:
        with self._lock:
            while self._waiters:
                loop, future = self._waiters.popleft()
                if loop.is_closed():
                    continue
                loop.call_soon_threadsafe(_resolve, future)
                return
            self._free += 1


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
    # A future cancelled between hand-off and now: its __aenter__ sees the cancellation and
    # (not finding itself among the waiters) releases the slot again.
