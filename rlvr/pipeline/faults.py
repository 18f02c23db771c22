"""The driver's watch over what the run started (docs/faults.md).

`Supervisor.tick` runs every `faults.poll_s` seconds while the driver waits (rlvr/runtime/waiter.py), and
checks on its workers through the waiter's runtime (its clock included):

- it pings every actor_infer and reward worker (`health()`): a worker that Ray restarted after a crash is seen by
  its new pid; an actor_infer one serves nothing until it has the current weights, which the supervisor pushes
  (those of the last sync, kept for that purpose); a worker that stays down (no restarts left, or not back
  within `faults.restart_timeout_s`) stops the run;
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import ray
from ray.exceptions import RayActorError

from rlvr.config.run import FaultsConfig
from rlvr.pipeline import checkpoint
from rlvr.pipeline.local_servers import reachable_url
from rlvr.runtime.resend import gather_resent
from rlvr.runtime.waiter import DeadlineExceeded, Waiter, WorkerFault

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


@dataclass
class _Watched:
    """One restartable worker under watch: its handle, and what the supervisor last knew of it."""

    name: str  # "actor_infer/0", "reward/math/0": the component in faults/... metrics and faults.jsonl
    handle: Any
    needs_weights: bool  # an actor_infer worker: gets the current weights when it comes back
    pid: int | None = None
    ping: tuple[ray.ObjectRef, float] | None = None  # health call in flight, and when it was sent
    push: ray.ObjectRef | None = None  # weights on their way to it after a restart
    down_since: float | None = None


class Supervisor:
    def __init__(self, cfg: FaultsConfig, waiter: Waiter, events: FaultLog):
        self.cfg = cfg
        self.waiter = waiter
        self.events = events
        self.workers: list[_Watched] = []
        self.infer: list = []
        self.judge = None
        self.judge_rewards: list = []  # reward actors whose worker talks to the local judge server
        self._weights: tuple[Any, int] | None = None  # the last synced weights (a ref) and their version
        # Where a restarted actor_infer worker gets weights when no sync kept them in the object store (the
        # collective weight sync, rlvr/pipeline/weight_sync.py): called when one comes back; (ref, version) or None.
        self.weight_source: Callable[[], tuple[Any, int] | None] | None = None  # set by watch()
        self.sandbox = None  # the shared sandbox server (rlvr/pipeline/local_servers.py), whose restarts it counts
        self._sandbox_restarts = 0
        self.sandbox_rewards: list = []  # reward actors that use it
        self._judge_restarts = 0
        waiter.supervise_with(self.tick, self.describe)

    def watch(self, clusters, judge=None, rewards_cfg: dict | None = None, sandbox=None,
              weight_source: Callable[[], tuple[Any, int] | None] | None = None) -> None:
        """What to watch: the actor_infer and reward workers, the local judge server and the shared sandbox server
        with the reward actors that use them (those whose config got their URL), and where restarted inference
        workers get weights (`weight_source`). Waits until every worker is up (model loaded), so that start-up,
        which may take minutes, is bounded by faults.restart_timeout_s and not charged to the first step's
        deadlines."""
        self.weight_source = weight_source
        self.infer = list(clusters.actor_infer.workers)
        self.workers = [_Watched(f"actor_infer/{i}", w, True) for i, w in enumerate(self.infer)]
        self.workers += [_Watched(f"reward/{d}/{i}", w, False) for d, c in clusters.rewards.items()
                         for i, w in enumerate(c.workers)]
        health = self.waiter.get([w.handle.health.remote() for w in self.workers],
                                 "start-up of the actor_infer and reward workers", timeout_s=self.cfg.restart_timeout_s)
        for w, h in zip(self.workers, health):
            w.pid = h["pid"]
        self.judge = judge
        if judge is not None and rewards_cfg:
            self.judge_rewards = [w for d, r in rewards_cfg.items() if r.args.get("base_url") == judge.url
                                  for w in clusters.rewards[d].workers]
        self.sandbox = sandbox
        if sandbox is not None and rewards_cfg:
            self.sandbox_rewards = [w for d, r in rewards_cfg.items() if r.args.get("url") == sandbox.url
                                    for w in clusters.rewards[d].workers]
            sandbox.tell_on_restart(self.sandbox_rewards)

    # ------------------------------------------------------------------ weights
    def push_weights(self, weights: ray.ObjectRef, version: int) -> None:
        """Loads `weights` into every actor_infer worker (one that dies meanwhile gets them once it is back), and
        keeps the ref for workers restarted later: pinned in the object store until the next sync."""
        self._weights = (weights, version) if self.cfg.max_restarts > 0 else None
        gather_resent(self.waiter, self.infer, "load_weights", (weights, version), "actor_infer.load_weights",
                      self.cfg.resend_patience_s,
                      on_resend=lambda i, err: self.events.record("actor_infer", "sync_resent", worker=i,
                                                                  error=str(err)[:200]))

    # ------------------------------------------------------------------ the watch
    def tick(self) -> None:
        now = self.waiter.runtime.now()
        for w in self.workers:
            self._check_worker(w, now)
        self._check_judge()
        self._check_sandbox()

    def _check_sandbox(self) -> None:
        """The shared sandbox server restarts itself (its watcher thread); here its restarts are recorded."""
        if self.sandbox is not None and self.sandbox.restarts > self._sandbox_restarts:
            self._sandbox_restarts = self.sandbox.restarts
            self.events.record("sandbox", "restarts", url=self.sandbox.url)

    def _check_worker(self, w: _Watched, now: float) -> None:
        if w.push is not None:
            self._check_push(w, now)
            return
        if w.ping is None:
            w.ping = (w.handle.health.remote(), now)
            return
        if not self.waiter.runtime.wait([w.ping[0]], timeout=0)[0]:
            return
        ping, w.ping = w.ping[0], None
        try:
            health = self.waiter.runtime.get(ping)
        except RayActorError as err:  # died, or restarting (calls are refused meanwhile)
            if w.down_since is None:
                w.down_since = now
            if not self.cfg.max_restarts or now - w.down_since > self.cfg.restart_timeout_s:
                raise WorkerFault(f"{w.name} died and did not come back (faults.max_restarts="
                                  f"{self.cfg.max_restarts}, faults.restart_timeout_s={self.cfg.restart_timeout_s:g})"
                                  f": {err}") from err
            return
        restarted = w.pid is not None and health["pid"] != w.pid  # None: first sight of it (during start-up)
        weights = self._restart_weights() if w.needs_weights and health["needs_weights"] else None
        if weights is not None:
            w.push = w.handle.load_weights.remote(*weights)  # recorded once the weights are in
            w.down_since = w.down_since or now
        elif restarted:
            self._recovered(w, now)
        w.pid = health["pid"]

    def _restart_weights(self) -> tuple[Any, int] | None:
        if self._weights is not None:
            return self._weights
        return self.weight_source() if self.weight_source is not None else None

    def _check_push(self, w: _Watched, now: float) -> None:
        if not self.waiter.runtime.wait([w.push], timeout=0)[0]:
            return
        push, w.push = w.push, None
        try:
            self.waiter.runtime.get(push)
        except RayActorError:  # died again while loading: the next ping finds it
            return
        self._recovered(w, now)

    def _recovered(self, w: _Watched, now: float) -> None:
        seconds = None if w.down_since is None else now - w.down_since
        # A restarted reward actor has its config's server URLs: a server restarted on another port meanwhile
        # answers elsewhere.
        if self.judge is not None and w.handle in self.judge_rewards:
            w.handle.set_base_url.remote(self.judge.url)
        if self.sandbox is not None and w.handle in self.sandbox_rewards:
            w.handle.set_sandbox_url.remote(self.sandbox.url)
        component, _, index = w.name.rpartition("/")
        self.events.record(component, "restarts", seconds=seconds, worker=int(index))
        w.down_since = None

    def describe(self) -> str:
        """Workers that have not answered a health check for a while (hung, or restarting), for error messages."""
        now = self.waiter.runtime.now()
        late = [f"{w.name} (no answer to a health check for {now - w.ping[1]:.0f}s)" for w in self.workers
                if w.ping is not None and now - w.ping[1] > max(5.0, 5 * self.cfg.poll_s)]
        return ", ".join(late)

    def _check_judge(self) -> None:
        judge = self.judge
        if judge is None or judge.alive() or judge.stopped:
            return
        if self._judge_restarts >= self.cfg.max_restarts:
            raise WorkerFault(f"the local judge server died (exit code {judge.process.returncode}) and was "
                              f"restarted {self._judge_restarts} times already (faults.max_restarts)")
        start = self.waiter.runtime.now()
        old_url, code = judge.url, judge.process.returncode
        judge.restart()
        judge.url = reachable_url(judge.url, urlsplit(judge.url).hostname or "")  # bound to 0.0.0.0: this node's
        self._judge_restarts += 1
        if judge.url != old_url:
            self.waiter.get([a.set_base_url.remote(judge.url) for a in self.judge_rewards], "judge URL update")
        self.events.record("judge", "restarts", seconds=self.waiter.runtime.now() - start, exit_code=code,
                           url=judge.url)


def run_stopped(err: BaseException, run_dir: Path, step: int) -> RunStopped:
    """The error a run stops with after a fault it could not recover from: what happened, and where to go on."""
    ckpts = checkpoint.list_checkpoints(run_dir)
    where = (f"the last good checkpoint is {ckpts[-1]}: continue with run.resume=latest" if ckpts
             else "no checkpoint was saved (run.save_every)")
    kind = "a wait ran past its deadline" if isinstance(err, DeadlineExceeded) else "a worker fault"
    return RunStopped(f"the run stopped at step {step} after {kind}: {type(err).__name__}: {err}. {where}.")


FATAL_FAULTS = (WorkerFault, DeadlineExceeded, RayActorError)
