"""Requests sent again to a worker that Ray restarted: nothing lost (docs/faults.md).

A call in flight on an actor that dies fails with `RayActorError`; Ray restarts the actor (`faults.max_restarts`).
`resend` (inside actors, on their asyncio loop) and `call_resent` / `gather_resent` (the driver's forms, waiting
through a `Waiter`) send the call again until it gets through, pausing while the actor restarts, for up to
`faults.restart_timeout_s`; they count the request once. Past that the error goes to the caller, who counts the loss.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import ray
from ray.exceptions import RayActorError

from rlvr.runtime.waiter import Waiter, WorkerFault


def backoff_s(attempt: int) -> float:
    """Pause before re-send `attempt` (1, 2, ...) to a worker that is restarting: 0.1 s doubling up to 2 s."""
    return min(2.0, 0.05 * 2**attempt)


async def resend(send: Callable[[int], Awaitable[Any]], patience_s: float,
                 on_resend: Callable[[BaseException], None]) -> Any:
    """`await send(attempt)` for attempt 0, 1, ...: a call whose actor died is sent again (to the restarted actor,
    or whichever `send` picks for that attempt), pausing while Ray restarts it, for up to `patience_s` after the
    first failure; `on_resend` counts the request once. Calls rejected during the restart are not counted
    apart: what matters is whether the request got through."""
    attempt, first = 0, None
    while True:
        try:
            return await send(attempt)
        except RayActorError as err:
            now = asyncio.get_running_loop().time()  # the loop's clock: simulated time under rlvr/sim
            if first is None:
                first = now
                on_resend(err)
            elif now - first > patience_s:
                raise
            attempt += 1
            await asyncio.sleep(backoff_s(attempt))


def call_resent(waiter: Waiter, send: Callable[[], ray.ObjectRef], what: str, patience_s: float,
                on_resend: Callable[[BaseException], None] | None = None,
                first_ref: ray.ObjectRef | None = None) -> Any:
    """The driver's form of `resend`: waits with `waiter` (deadline, supervision), pauses while ticking."""
    attempt, first = 0, None
    ref = first_ref if first_ref is not None else send()
    while True:
        try:
            return waiter.get(ref, what)
        except RayActorError as err:
            now = waiter.runtime.now()
            if first is None:
                first = now
                if on_resend is not None:
                    on_resend(err)
            elif now - first > patience_s:
                raise WorkerFault(f"{what}: the worker died and was not back within {patience_s:g}s "
                                  f"(faults.restart_timeout_s): {err}") from err
            attempt += 1
            waiter.pause(backoff_s(attempt))
            ref = send()


def gather_resent(waiter: Waiter, workers: Sequence[Any], method: str, args: tuple, what: str, patience_s: float,
                  on_resend: Callable[[int, BaseException], None] | None = None) -> list[Any]:
    """The same call on every worker from the driver, sent at once; a call whose worker died is sent again once
    it is back (see `call_resent`)."""
    refs = [getattr(w, method).remote(*args) for w in workers]
    return [call_resent(waiter, lambda w=w: getattr(w, method).remote(*args), f"{what} (worker {i})", patience_s,
                        None if on_resend is None else (lambda err, i=i: on_resend(i, err)), first_ref=ref)
            for i, (w, ref) in enumerate(zip(workers, refs))]
