"""The driver's view of one step's rollout: groups streaming in from every domain's scheduler.

A `Rollout` is started (every scheduler begins generating and scoring at once) and consumed later, whole or in
mini-batches of complete groups in completion order across domains. Between the two the driver may do other
work: train on the previous step's rollout (one-step off-policy) or on the first mini-batches of this one
(mini-batch pipeline). The time the driver spends blocked on it is measured: that is the reward stall.
"""

from __future__ import annotations

from collections.abc import Iterator

from rlvr.data.types import Group
from rlvr.workers.runtime import RAY


class Rollout:
    def __init__(self, schedulers: dict, quotas: dict[str, int], step: int, version: int, runtime=RAY):
        self.step = step
        self.rt = runtime  # Ray, or the simulator's virtual-time stand-in (rlvr/workers/runtime.py)
        self.schedulers = {d: s for d, s in schedulers.items() if quotas.get(d, 0) > 0}
        self.metrics: dict[str, float] = {f"{d}/scheduler/quota": float(q) for d, q in quotas.items()}
        self.wait_s = 0.0  # driver time blocked on this rollout (generation excluded when waited apart)
        self.credit_before: dict[str, float] = {}  # the quota credit before this rollout took its quotas
        self.rt.get([s.start_batch.remote(quotas[d], step, version) for d, s in self.schedulers.items()])

    def wait_generated(self) -> float:
        """Blocks until every domain's initial generation of this step is done; returns the seconds waited."""
        start = self.rt.now()
        self.rt.get([s.wait_generated.remote(self.step) for s in self.schedulers.values()])
        return self.rt.now() - start

    def stream(self, groups_per_batch: int | None) -> Iterator[list[Group]]:
        """Lists of `groups_per_batch` complete groups (the last may be shorter) as they complete, across
        domains; None: one list with every group of the step. Each domain's final metrics land in
        `self.metrics` once its scheduler is done."""
        calls = {s.next_groups.remote(self.step): d for d, s in self.schedulers.items()}
        ready: list[Group] = []
        while calls:
            start = self.rt.now()
            done, _ = self.rt.wait(list(calls), num_returns=1)
            domain = calls.pop(done[0])
            groups, final = self.rt.get(done[0])
            self.wait_s += self.rt.now() - start
            ready.extend(groups)
            if final is None:
                calls[self.schedulers[domain].next_groups.remote(self.step)] = domain
            else:
                self.metrics.update(final)
            while groups_per_batch and len(ready) >= groups_per_batch:
                yield ready[:groups_per_batch]
                ready = ready[groups_per_batch:]
        if ready:
            yield ready

    def collect(self) -> list[Group]:
        return [g for part in self.stream(None) for g in part]

    def cancel(self) -> None:
        self.rt.get([s.cancel_batch.remote(self.step) for s in self.schedulers.values()])


def by_domain(groups: list[Group]) -> dict[str, list[Group]]:
    out: dict[str, list[Group]] = {}
    for g in groups:
        out.setdefault(g.domain, []).append(g)
    return out
