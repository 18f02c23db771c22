"""The driver's watch over what the run started (docs/faults.md).

`Supervisor.tick` runs every `faults.poll_s` seconds while the driver waits (rlvr/workers/supervision.py):

- an actor_infer worker that Ray restarted after a crash serves nothing until it has the current weights: the
  supervisor sees it in `health()` and pushes the weights of the last sync (kept for that purpose);
- the local judge server, started by the driver, is started again when it dies (same port when free, else a new
  one, which the judge reward workers are then told).

Every fault is counted under `faults/<component>/<event>` in the next step's metrics and written, with its time
and the seconds recovery took, to `<run_dir>/faults.jsonl`. A fault that cannot be recovered stops the run with
`RunStopped`, which names the last good checkpoint to resume from.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError

from rlvr.config import FaultsConfig
from rlvr.pipeline import checkpoint
from rlvr.workers.supervision import DeadlineExceeded, Waiter, WorkerFault, gather_resent

log = logging.getLogger(__name__)


class RunStopped(RuntimeError):
    """The run could not go on after a fault; the message says why and where to resume from."""


class FaultLog:
    """Counters for the step's metrics, and one JSON line per event in faults.jsonl."""

    def __init__(self, path: Path | None):
        self.path = path
        self.counts: Counter[str] = Counter()
        self.step = 0

    def record(self, component: str, event: str, seconds: float | None = None, **detail: Any) -> None:
        self.counts[f"faults/{component}/{event}"] += 1
        entry = {"time": time.time(), "step": self.step, "component": component, "event": event,
                 "seconds": None if seconds is None else round(seconds, 3), **detail}
        log.warning("fault: %s %s%s %s", component, event, "" if seconds is None else f" in {seconds:.1f}s",
                    detail or "")
        if self.path is not None:
            with open(self.path, "a") as f:
                f.write(json.dumps(entry) + "\n")

    def pop_metrics(self) -> dict[str, float]:
        out = {k: float(v) for k, v in self.counts.items()}
        self.counts.clear()
        return out


class Supervisor:
    def __init__(self, cfg: FaultsConfig, waiter: Waiter, events: FaultLog):
        self.cfg = cfg
        self.waiter = waiter
        self.events = events
        self.infer: list = []
        self.judge = None
        self.judge_rewards: list = []  # reward actors whose worker talks to the local judge server
        self._weights: tuple[Any, int] | None = None  # the last synced weights (a ref) and their version
        self._pings: dict[int, tuple[ray.ObjectRef, float]] = {}  # worker -> health call in flight, sent at
        self._pushing: dict[int, tuple[ray.ObjectRef, float]] = {}
        self._down_since: dict[int, float] = {}
        self._judge_restarts = 0
        waiter.tick, waiter.describe = self.tick, self.describe

    def watch(self, clusters, judge=None, rewards_cfg: dict | None = None) -> None:
        """What to watch: the actor_infer workers, and the local judge server with the reward actors that use it
        (those whose config got its URL). Waits until every worker is up (model loaded), so that start-up, which
        may take minutes, is bounded by faults.restart_timeout_s and not charged to the first step's deadlines."""
        workers = [*clusters.actor_infer.workers, *(w for c in clusters.rewards.values() for w in c.workers)]
        self.waiter.get([w.__ray_ready__.remote() for w in workers], "start-up of the actor_infer and reward workers",
                        timeout_s=self.cfg.restart_timeout_s)
        self.infer = list(clusters.actor_infer.workers)
        self.judge = judge
        if judge is not None and rewards_cfg:
            self.judge_rewards = [w for d, r in rewards_cfg.items() if r.args.get("base_url") == judge.url
                                  for w in clusters.rewards[d].workers]

    # ------------------------------------------------------------------ weights
    def push_weights(self, weights: ray.ObjectRef, version: int) -> None:
        """Loads `weights` into every actor_infer worker (one that dies meanwhile gets them once it is back), and
        keeps the ref for workers restarted later: pinned in the object store until the next sync."""
        self._weights = (weights, version) if self.cfg.max_restarts > 0 else None
        gather_resent(self.waiter, self.infer, "load_weights", (weights, version), "actor_infer.load_weights",
                      self.cfg.restart_timeout_s if self.cfg.max_restarts else 0.0, on_resend=lambda i, err: self.events.record(
                          "actor_infer", "sync_resent", worker=i, error=str(err)[:200]))

    # ------------------------------------------------------------------ the watch
    def tick(self) -> None:
        self._check_infer()
        self._check_judge()

    def _check_infer(self) -> None:
        now = time.monotonic()
        for i, worker in enumerate(self.infer):
            if i in self._pushing:
                self._check_push(i, now)
                continue
            if i not in self._pings:
                self._pings[i] = (worker.health.remote(), now)
                continue
            ping = self._pings[i][0]
            if not ray.wait([ping], timeout=0)[0]:
                continue
            del self._pings[i]
            try:
                health = ray.get(ping)
            except RayActorError:
                self._down_since.setdefault(i, now)
                continue
            if health["needs_weights"] and self._weights is not None:
                ref, version = self._weights
                self._pushing[i] = (worker.load_weights.remote(ref, version), now)
                self._down_since.setdefault(i, now)

    def describe(self) -> str:
        """Workers that have not answered a health check for a while (hung, or restarting), for error messages."""
        now = time.monotonic()
        late = [f"actor_infer worker {i} (no answer to a health check for {now - sent:.0f}s)"
                for i, (_, sent) in sorted(self._pings.items()) if now - sent > max(5.0, 5 * self.cfg.poll_s)]
        return ", ".join(late)

    def _check_push(self, i: int, now: float) -> None:
        ref, _started = self._pushing[i]
        if not ray.wait([ref], timeout=0)[0]:
            return
        del self._pushing[i]
        try:
            ray.get(ref)
        except RayActorError:  # died again while loading: the next ping finds it
            return
        down = self._down_since.pop(i, now)
        self.events.record("actor_infer", "restarts", seconds=now - down, worker=i)

    def _check_judge(self) -> None:
        judge = self.judge
        if judge is None or judge.alive() or judge.stopped:
            return
        if self._judge_restarts >= self.cfg.max_restarts:
            raise WorkerFault(f"the local judge server died (exit code {judge.process.returncode}) and was "
                              f"restarted {self._judge_restarts} times already (faults.max_restarts)")
        start = time.monotonic()
        old_url, code = judge.url, judge.process.returncode
        judge.restart()
        self._judge_restarts += 1
        if judge.url != old_url:
            self.waiter.get([a.set_base_url.remote(judge.url) for a in self.judge_rewards], "judge URL update")
        self.events.record("judge", "restarts", seconds=time.monotonic() - start, exit_code=code, url=judge.url)


def run_stopped(err: BaseException, run_dir: Path, step: int) -> RunStopped:
    """The error a run stops with after a fault it could not recover from: what happened, and where to go on."""
    ckpts = checkpoint.list_checkpoints(run_dir)
    where = (f"the last good checkpoint is {ckpts[-1]}: continue with run.resume=latest" if ckpts
             else "no checkpoint was saved (run.save_every)")
    kind = "a wait ran past its deadline" if isinstance(err, DeadlineExceeded) else "a worker fault"
    return RunStopped(f"the run stopped at step {step} after {kind}: {type(err).__name__}: {err}. {where}.")


FATAL_FAULTS = (WorkerFault, DeadlineExceeded, RayActorError)
