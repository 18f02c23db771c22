"""The inference router (async Ray actor): one per run when there are several actor_infer workers, shared by every
domain's scheduler, so that load is balanced across all of them rather than per scheduler.

Each request goes to the worker with the fewest sequences outstanding (requested and not yet returned; a request
for n samples counts n), ties to the lowest index. It has the worker's `generate` / `abort` interface, so a
scheduler holds it as its single inference worker. Costs one extra Ray hop per request (a few ms), against
round-robin's blindness to long and short requests and to the other domains' traffic. A worker that died is
passed over for a few seconds (Ray restarts it meanwhile; the scheduler re-sends the request, which the router
gives to another worker).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ray.exceptions import RayActorError

from rlvr.data.types import Generation, SamplingParams

COOLDOWN_S = 5.0  # a worker whose call failed with its death gets no request for this long (it is restarting)


def least_outstanding(loads: list[int], avoid: set[int] = frozenset()) -> int:
    """Index of the smallest load among the workers not to avoid (all of them when every one is); the lowest index
    among equals."""
    candidates = [i for i in range(len(loads)) if i not in avoid] or range(len(loads))
    return min(candidates, key=lambda i: (loads[i], i))


class InferRouter:
    def __init__(self, workers: list[Any], rank: int = 0):
        if not workers:
            raise ValueError("InferRouter needs at least one inference worker")
        self.workers = list(workers)
        self.outstanding = [0] * len(self.workers)
        self.served = [0] * len(self.workers)  # sequences sent to each worker, for metrics and tests
        self.peak = [0] * len(self.workers)
        self.where: dict[str, int] = {}  # request id -> worker index, while in flight (abort goes there)
        self.down_until = [0.0] * len(self.workers)  # loop time until which a worker that died is passed over

    async def generate(self, prompt_ids: list[int], n: int, sampling: SamplingParams,
                       request_id: str | None = None) -> list[Generation]:
        now = asyncio.get_running_loop().time()
        i = least_outstanding(self.outstanding, {j for j, t in enumerate(self.down_until) if t > now})
        self.outstanding[i] += n
        self.served[i] += n
        self.peak[i] = max(self.peak[i], self.outstanding[i])
        if request_id is not None:
            self.where[request_id] = i
        try:
            return await self.workers[i].generate.remote(prompt_ids, n, sampling, request_id)
        except RayActorError:
            # the caller's re-send (rlvr/runtime/resend.py `resend`) then goes to another worker
            self.down_until[i] = asyncio.get_running_loop().time() + COOLDOWN_S
            raise
        finally:
            self.outstanding[i] -= n
            if request_id is not None:
                self.where.pop(request_id, None)

    async def abort(self, request_ids: list[str]) -> None:
        by_worker: dict[int, list[str]] = {}
        for request_id in request_ids:
            if request_id in self.where:
                by_worker.setdefault(self.where[request_id], []).append(request_id)
        await asyncio.gather(*(self.workers[i].abort.remote(ids) for i, ids in by_worker.items()))

    async def stats(self) -> dict[str, list[int]]:
        return {"outstanding": list(self.outstanding), "served": list(self.served), "peak": list(self.peak)}


__all__ = ["InferRouter", "least_outstanding"]
