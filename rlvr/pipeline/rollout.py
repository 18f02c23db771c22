"""The driver's view of one step's rollout: groups streaming in from every domain's scheduler.

A `Rollout` is started (every scheduler begins generating and scoring at once) and consumed later, whole or in
mini-batches of complete groups in completion order across domains. Between the two the driver may do other
work: train on the previous step's rollout (one-step off-policy) or on the first mini-batches of this one
(mini-batch pipeline). The time the driver spends blocked on it is measured: that is the reward stall.
Every wait has a deadline, and a scheduler that dies meanwhile is brought back by `DomainSchedulers.recover`
(the groups it still owes come from the restored actor).
"""

from __future__ import annotations

from collections.abc import Iterator

from rlvr.data.types import Group
from rlvr.pipeline.domain_schedulers import LOST, DomainSchedulers


class Rollout:
    def __init__(self, schedulers: DomainSchedulers, quotas: dict[str, int], step: int, version: int):
        self.step = step
        self.schedulers = schedulers
        self.rt = schedulers.waiter.runtime  # the clock of the waits: Ray's, or the simulator's virtual one
        self.domains = [d for d in schedulers.domains if quotas.get(d, 0) > 0]
        self.metrics: dict[str, float] = {f"{d}/scheduler/quota": float(q) for d, q in quotas.items()}
        self.wait_s = 0.0  # driver time blocked on this rollout (generation excluded when waited apart)
        self.credit_before: dict[str, float] = {}  # the quota credit before this rollout took its quotas
        for d in self.domains:
            schedulers.start(d, quotas[d], step, version)

    def wait_generated(self) -> float:
        """Blocks until every domain's initial generation of this step is done; returns the seconds waited."""
        start = self.rt.now()
        self.schedulers.wait_generated(self.domains, self.step)
        return self.rt.now() - start

    def stream(self, groups_per_batch: int | None) -> Iterator[list[Group]]:
        """Lists of `groups_per_batch` complete groups (the last may be shorter) as they complete, across
        domains; None: one list with every group of the step. Each domain's final metrics land in
        `self.metrics` once its scheduler is done."""
        schedulers = self.schedulers
        calls = {schedulers.next_groups(d, self.step): d for d in self.domains}
        ready: list[Group] = []
        while calls:
            start = self.rt.now()
            done = schedulers.waiter.first(list(calls), f"step {self.step} rollout ({', '.join(calls.values())})")
            domain = calls.pop(done)
            try:
                groups, final = self.rt.get(done)
            except LOST as err:
                schedulers.recover(domain, err)
                calls[schedulers.next_groups(domain, self.step)] = domain
                continue
            finally:
                self.wait_s += self.rt.now() - start
            schedulers.handed_over(domain, self.step, groups)
            ready.extend(groups)
            if final is None:
                calls[schedulers.next_groups(domain, self.step)] = domain
            else:
                schedulers.finished(domain, self.step)
                self.metrics.update(final)
            while groups_per_batch and len(ready) >= groups_per_batch:
                yield ready[:groups_per_batch]
                ready = ready[groups_per_batch:]
        if ready:
            yield ready

    def collect(self) -> list[Group]:
        return [g for part in self.stream(None) for g in part]

    def cancel(self) -> None:
        self.schedulers.cancel(self.domains, self.step)


def by_domain(groups: list[Group]) -> dict[str, list[Group]]:
    out: dict[str, list[Group]] = {}
    for g in groups:
        out.setdefault(g.domain, []).append(g)
    return out
