"""The per-domain scheduler actors as the driver sees them: every call waited on with a deadline, and a
scheduler that dies brought back at its exact data position (docs/faults.md).

Each `start_batch` returns the scheduler's snapshot from just before the step took anything (data cursor,
carry-over buffer, prompts taken but not yet handed to the trainer). The driver keeps the snapshots of the steps
still running, and the uids of every group handed to the trainer since. When a scheduler dies, Ray restarts the
actor (its constructor runs again); `recover` attaches it to the domain's data and workers again, restores it
from the snapshot of its oldest running step minus what the trainer already got, and starts the running steps
again for the groups they still owe. Nothing is lost and nothing is trained twice; groups that were in flight are
generated again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import ray
from ray.exceptions import RayActorError

from rlvr.config.root import Config
from rlvr.data.types import Group
from rlvr.pipeline.faults import FaultLog
from rlvr.runtime.resend import call_resent
from rlvr.runtime.waiter import Waiter, WorkerFault
from rlvr.schedulers.dynamic_sampling import DynamicSamplingScheduler, SchedulerRestarted
from rlvr.workers.placement import Planner

LOST = (RayActorError, SchedulerRestarted)  # the actor died, or was restarted and not restored yet


@dataclass
class _Step:
    quota: int
    version: int
    handed: int = 0  # groups handed to the trainer so far


@dataclass
class _RestorePoint:
    snapshot: dict[str, Any]
    handed_at: int  # how many uids the domain had handed over when the snapshot was taken


class DomainSchedulers:
    def __init__(self, cfg: Config, data: dict, infer_workers: list, reward_workers: dict[str, list],
                 waiter: Waiter, events: FaultLog, episodes: dict | None = None, placement: Planner | None = None):
        """`infer_workers`: the actor_infer workers, or the router in front of several (rlvr/workers/
        infer_router.py). `episodes`: an EpisodeRunner per env domain (rlvr/rollout/episode.py); its scheduler
        plays, not scores. `placement`: where the actors go (rlvr/workers/placement.py). Every call waits through
        `waiter`, hence in its runtime's time (Ray's, or the simulator's: rlvr/sim)."""
        self.waiter, self.events, self.faults = waiter, events, cfg.faults
        self.planner = placement
        self.actors = self._start_actors(cfg, data, infer_workers, reward_workers, episodes or {})
        self.running: dict[str, dict[int, _Step]] = {d: {} for d in self.actors}
        self.points: dict[str, dict[int, _RestorePoint]] = {d: {} for d in self.actors}
        self.latest: dict[str, _RestorePoint | None] = {d: None for d in self.actors}
        self.handed: dict[str, list[str]] = {d: [] for d in self.actors}
        self._handed_base = {d: 0 for d in self.actors}  # uids trimmed from the front of `handed`

    def _start_actors(self, cfg: Config, data: dict, infer_workers: list, reward_workers: dict[str, list],
                      episodes: dict) -> dict[str, Any]:
        """One restartable DynamicSamplingScheduler actor per domain (the simulator puts local ones instead)."""
        options = {"num_cpus": 0, "max_concurrency": 1000, "max_restarts": cfg.faults.max_restarts}
        where = self.planner.scheduler() if self.planner is not None else None
        remote = ray.remote(DynamicSamplingScheduler)
        # The data go to the object store once, and stay referenced here: a restarted actor is attached to them
        # again. They and the worker handles go by `attach`, not the constructor (see there).
        data_refs = {d: (ray.put(data[d].train), ray.put(data[d].val)) for d in cfg.domains}
        self._attach_args = {d: (*data_refs[d], infer_workers, reward_workers.get(d, []), episodes.get(d))
                             for d in cfg.domains}
        actors = {d: remote.options(**{**options, **(where.for_rank(i) if where else {})}).remote(
                      d, None, None, [], [], cfg)
                  for i, d in enumerate(cfg.domains)}
        refs = {d: a.attach.remote(*self._attach_args[d]) for d, a in actors.items()}
        for d, ref in refs.items():
            self.waiter.get(ref, f"scheduler/{d}.attach")
        return actors

    @property
    def domains(self) -> list[str]:
        return list(self.actors)

    # ------------------------------------------------------------------ one step
    def start(self, domain: str, n_groups: int, step: int, version: int) -> None:
        snapshot = self._call(domain, lambda a: a.start_batch.remote(n_groups, step, version),
                              f"scheduler/{domain}.start_batch (step {step})")
        point = _RestorePoint(snapshot, self._handed_count(domain))
        self.points[domain][step] = self.latest[domain] = point
        self.running[domain][step] = _Step(n_groups, version)

    def next_groups(self, domain: str, step: int) -> ray.ObjectRef:
        return self.actors[domain].next_groups.remote(step)

    def handed_over(self, domain: str, step: int, groups: list[Group]) -> None:
        self.handed[domain].extend(g.prompt.uid for g in groups)
        self.running[domain][step].handed += len(groups)

    def finished(self, domain: str, step: int) -> None:
        self.running[domain].pop(step, None)
        self.points[domain].pop(step, None)
        self._trim(domain)

    def wait_generated(self, domains: list[str], step: int) -> None:
        self._call_all(domains, lambda a: a.wait_generated.remote(step), f"step {step} generation")

    def cancel(self, domains: list[str], step: int) -> None:
        for d in domains:
            self.running[d].pop(step, None)
            self.points[d].pop(step, None)
        refs = [self.actors[d].cancel_batch.remote(step) for d in domains]
        for ref in refs:  # a scheduler that died has nothing left to cancel
            try:
                self.waiter.get(ref, f"cancel step {step}")
            except LOST:
                pass

    # ------------------------------------------------------------------ whole-run calls
    def validate(self, version: int) -> list[Any]:
        return self._call_all(self.domains, lambda a: a.validate.remote(version), f"validation at step {version}")

    def state_dicts(self) -> dict[str, dict]:
        return dict(zip(self.domains, self._call_all(self.domains, lambda a: a.state_dict.remote(), "state_dict")))

    def load(self, states: dict[str, dict]) -> None:
        """Resume: each scheduler from its checkpointed state, which is also its restore point until its first
        step starts."""
        for d, state in states.items():
            self._call(d, lambda a, s=state: a.load_state_dict.remote(s), f"scheduler/{d}.load_state_dict")
            self.latest[d] = _RestorePoint({**state, "pending": []}, self._handed_count(d))

    def kill(self) -> None:
        for actor in self.actors.values():
            ray.kill(actor, no_restart=True)

    # ------------------------------------------------------------------ recovery
    def recover(self, domain: str, err: BaseException) -> None:
        """Brings a scheduler that died back where it was (see the module docstring)."""
        clock = self.waiter.runtime.now
        start = clock()
        actor = self.actors[domain]
        if not self.faults.max_restarts:
            raise WorkerFault(f"scheduler/{domain} died (faults.max_restarts=0: no restarts)") from err
        health = call_resent(self.waiter, actor.health.remote, f"scheduler/{domain} restart",
                             self.faults.restart_timeout_s)
        if health["restored"]:
            return  # the actor did not restart (a call failed in transit): its state is whole
        running = sorted(self.running[domain].items())
        point = self.points[domain][running[0][0]] if running else self.latest[domain]
        if point is None:
            raise WorkerFault(f"scheduler/{domain} died before its first step: nothing to restore it from") from err
        since = self.handed[domain][point.handed_at - self._handed_base[domain]:]
        self.waiter.get(actor.attach.remote(*self._attach_args[domain]), f"scheduler/{domain}.attach")
        given_back = self.waiter.get(actor.restore.remote(point.snapshot, since), f"scheduler/{domain}.restore")
        for step, s in running:
            self.waiter.get(actor.start_batch.remote(s.quota - s.handed, step, s.version),
                            f"scheduler/{domain}.start_batch (step {step}, after a restart)")
        self.events.record(domain, "scheduler_restarts", seconds=clock() - start,
                           steps=[s for s, _ in running], cause=f"{type(err).__name__}"[:80], **given_back)

    def _call(self, domain: str, send: Callable[[Any], ray.ObjectRef], what: str) -> Any:
        for _ in range(self.faults.max_restarts + 1):
            try:
                return self.waiter.get(send(self.actors[domain]), what)
            except LOST as err:
                self.recover(domain, err)
        raise WorkerFault(f"{what}: the scheduler kept dying ({self.faults.max_restarts + 1} tries)")

    def _call_all(self, domains: list[str], send: Callable[[Any], ray.ObjectRef], what: str) -> list[Any]:
        """The same call on several schedulers at once; one that dies is recovered and asked again."""
        refs = {d: send(self.actors[d]) for d in domains}
        out = []
        for d, ref in refs.items():
            try:
                out.append(self.waiter.get(ref, f"scheduler/{d}: {what}"))
            except LOST as err:
                self.recover(d, err)
                out.append(self._call(d, send, f"scheduler/{d}: {what}"))
        return out

    def _handed_count(self, domain: str) -> int:
        return self._handed_base[domain] + len(self.handed[domain])

    def _trim(self, domain: str) -> None:
        """Forgets handed-over uids that no restore point still needs (a long run's log stays small)."""
        needed = [p.handed_at for p in self.points[domain].values()]
        if self.latest[domain] is not None:
            needed.append(self.latest[domain].handed_at)
        keep_from = min(needed, default=self._handed_count(domain))
        drop = keep_from - self._handed_base[domain]
        if drop > 0:
            del self.handed[domain][:drop]
            self._handed_base[domain] = keep_from
