"""Fault injection into a running pipeline, for bench/chaos.py and tests/chaos (docs/faults.md).

A fault is a real SIGKILL of one of the run's own processes, found by pid through its actor or handle (never by
name: other runs share the machine), sent at a chosen step while that process has requests in flight:

    actor_infer  the first actor_infer worker            reward     the first reward actor of `domain`
    sandbox      the sandbox server of `domain`'s reward  judge      the local judge server
    scheduler    the scheduler actor of `domain`

`Injector` runs beside `pipeline.run()` in a thread: at each planned step it waits until the target is busy,
kills it, and measures the seconds until the replacement serves (a new pid that answers and, for actor_infer,
holds the current weights; for a server, whose /health answers). `RecordingPipeline` remembers which prompts
each step trained on, so that a chaos run can check that none was lost or trained twice.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import ray

from rlvr.judge_server.launcher import is_healthy
from rlvr.pipeline.rlvr_pipeline import RLVRPipeline

FAULTS = ("actor_infer", "reward", "sandbox", "judge", "scheduler")


@dataclass
class Injection:
    fault: str
    domain: str | None
    step: int
    pid: int = 0
    killed_at: float = 0.0  # time.monotonic()
    busy: bool = False  # the target had requests in flight when it was killed
    recover_s: float | None = None  # None: not back within the injector's patience
    new_pid: int | None = None
    orphans: list[int] = field(default_factory=list)  # children of the killed process still alive after recovery


def _get(ref: ray.ObjectRef, timeout_s: float = 5.0) -> Any:
    return ray.get(ref, timeout=timeout_s)


def status(pipeline, fault: str, domain: str | None) -> dict[str, Any]:
    """{"pid", "busy", "ready"} of the fault's target now (raises while it is down)."""
    if fault == "actor_infer":
        h = _get(pipeline.clusters.actor_infer.workers[0].health.remote())
        return {"pid": h["pid"], "busy": h["in_flight"] > 0, "ready": not h["needs_weights"]}
    if fault == "scheduler":
        h = _get(pipeline.schedulers.actors[domain].health.remote())
        return {"pid": h["pid"], "busy": bool(h["steps"]), "ready": h["restored"]}
    if fault == "judge":  # ready: its /health answers (a new process is there well before it serves)
        judge = pipeline.judge_server
        busy = _reward_in_flight(pipeline, domain) if domain else True
        return {"pid": judge.process.pid, "busy": busy, "ready": judge.alive() and is_healthy(judge.root_url)}
    actor = pipeline.clusters.rewards[domain].workers[0]
    h = _get(actor.health.remote())
    busy = _get(actor.metrics.remote(reset=False))["in_flight"] > 0
    if fault == "reward":
        return {"pid": h["pid"], "busy": busy, "ready": True}
    if fault == "sandbox":
        return {"pid": h["sandbox_pid"], "busy": busy, "ready": h["sandbox_alive"] and is_healthy(h["sandbox_url"])}
    raise ValueError(f"unknown fault {fault!r}; one of {FAULTS}")


def _reward_in_flight(pipeline, domain: str) -> bool:
    return _get(pipeline.clusters.rewards[domain].workers[0].metrics.remote(reset=False))["in_flight"] > 0


def _children(pid: int) -> list[int]:
    try:
        import psutil

        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except Exception:  # psutil missing, or the process already gone
        return []


def _alive(pid: int) -> bool:
    try:
        import psutil

        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except Exception:
        return False


def outliving(pids: list[int], grace_s: float) -> list[int]:
    """Those of `pids` still alive after `grace_s`. The children of a SIGKILLed process get their own SIGKILL (the
    process group killed before a restart, or their parent-death signal), and a process holding gigabytes takes
    a moment to exit: only one still there after the grace is an orphan."""
    deadline = time.monotonic() + grace_s
    while (alive := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


class Injector(threading.Thread):
    """Kills the planned targets of `plan` [(fault, domain, step), ...] as `pipeline.run()` reaches each step."""

    def __init__(self, pipeline, plan: list[tuple[str, str | None, int]], busy_timeout_s: float = 120.0,
                 recover_timeout_s: float = 600.0, orphan_grace_s: float = 10.0):
        super().__init__(daemon=True, name="rlvr-chaos")
        self.pipeline = pipeline
        self.injections = [Injection(f, d, s) for f, d, s in plan]
        self.busy_timeout_s, self.recover_timeout_s = busy_timeout_s, recover_timeout_s
        self.orphan_grace_s = orphan_grace_s
        self.errors: list[str] = []
        self._halt = threading.Event()
        self._settled = threading.Condition()
        self._pending = len(self.injections)  # injections not yet killed and recovered (or given up on)

    def stop(self) -> None:
        self._halt.set()
        with self._settled:
            self._settled.notify_all()

    def wait_settled(self, step: int, timeout_s: float = 900.0) -> None:
        """Blocks until every injection planned before `step` has been sent and its target is back (or given up
        on): a pipeline that calls this at the start of each step never overlaps two recoveries."""
        before = sum(i.step < step for i in self.injections)
        settled = lambda: len(self.injections) - self._pending >= before or self._halt.is_set()  # noqa: E731
        waiter = self.pipeline.waiter
        end = time.monotonic() + timeout_s
        # Called by the driver between steps: it keeps supervising meanwhile, as in any of its waits. A server
        # killed after the step's last request is only brought back by the driver's supervisor, so waiting here
        # without ticking would wait for a recovery that cannot happen.
        while time.monotonic() < end:
            with self._settled:
                if self._settled.wait_for(settled, min(waiter.poll_s, max(0.0, end - time.monotonic()))):
                    return
            waiter.run_tick()

    def run(self) -> None:
        try:
            for inj in self.injections:
                try:
                    if not self._wait_for_step(inj.step):
                        return
                    self._inject(inj)
                    self._await_recovery(inj)
                except Exception as err:  # reported by the caller; the run itself decides the outcome
                    self.errors.append(f"{inj.fault}@{inj.step}: {type(err).__name__}: {err}")
                with self._settled:
                    self._pending -= 1
                    self._settled.notify_all()
        finally:
            self._halt.set()
            with self._settled:
                self._settled.notify_all()

    def _wait_for_step(self, step: int) -> bool:
        while self.pipeline.step < step:
            if self._halt.wait(0.05):
                return False
        return True

    def _inject(self, inj: Injection) -> None:
        deadline = time.monotonic() + self.busy_timeout_s
        while True:
            st = status(self.pipeline, inj.fault, inj.domain)
            if st["busy"] and st["ready"] or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        inj.pid, inj.busy = st["pid"], st["busy"]
        children = _children(inj.pid)
        os.kill(inj.pid, signal.SIGKILL)
        inj.killed_at = time.monotonic()
        self._children = children

    def _await_recovery(self, inj: Injection) -> None:
        deadline = inj.killed_at + self.recover_timeout_s
        while time.monotonic() < deadline and not self._halt.is_set():
            try:
                st = status(self.pipeline, inj.fault, inj.domain)
            except Exception:  # down, or restarting
                time.sleep(0.1)
                continue
            if st["pid"] != inj.pid and st["ready"]:
                inj.recover_s = time.monotonic() - inj.killed_at
                inj.new_pid = st["pid"]
                break
            time.sleep(0.1)
        inj.orphans = outliving(self._children, self.orphan_grace_s)


class RecordingPipeline(RLVRPipeline):
    """The pipeline, plus the prompt uids of every group it trained on, step by step (`trained`). With
    `before_step` set (e.g. an Injector's `wait_settled`), each step starts only once that returns."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.trained: dict[int, list[str]] = {}
        self.before_step = None

    def model_update(self):
        if self.before_step is not None:
            self.before_step(self.step)
        return super().model_update()

    def train_on(self, groups, timer, step_lr):
        self.trained.setdefault(self.step, []).extend(g.prompt.uid for gs in groups.values() for g in gs)
        return super().train_on(groups, timer, step_lr)
