"""Calls to Ray actors that may die: deadlines on the driver's waits, and requests sent again to a restarted worker.

Two rules (docs/faults.md):

- Never a hang. Every wait of the driver goes through a `Waiter`: `waiter.get(refs, "what")` is `ray.get` with a
  deadline (`faults.wait_timeout_s`); past it a `DeadlineExceeded` names what was waited for. While it waits, the
  waiter calls its `tick` every `faults.poll_s` seconds: that is where the driver's supervisor brings restarted
  workers and dead servers back (rlvr/pipeline/faults.py), so recovery happens while the step goes on. A waiter
  waits and reads the clock through its runtime (rlvr/runtime/ray_runtime.py): Ray and the wall clock, or the
  simulator's virtual time (rlvr/sim), where deadlines and ticks are in simulated seconds.
- Nothing lost. A call in flight on an actor that dies fails with `RayActorError`, and is sent again once Ray has
  restarted the actor: rlvr/runtime/resend.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ray
from ray.exceptions import RayActorError

from rlvr.runtime.ray_runtime import RAY


class DeadlineExceeded(TimeoutError):
    """A wait of the driver ran past its deadline; the message names what was waited for and the config key."""


class WorkerFault(RuntimeError):
    """A worker or server died and could not be brought back (restarts or re-sends used up)."""


def was_restarted() -> bool:
    """True in an actor that Ray brought back after it died (False outside Ray)."""
    if not ray.is_initialized():  # get_runtime_context() would start a Ray cluster
        return False
    try:
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # not in a Ray actor
        return False


def is_worker_death(err: BaseException) -> bool:
    """The actor that ran the call died (or is restarting): `ActorDiedError`, `ActorUnavailableError`."""
    return isinstance(err, RayActorError)


class Waiter:
    """`ray.get` / `ray.wait` with a deadline, ticking a supervisor while it waits. `runtime`: how it waits and reads
    the clock (Ray's refs and the wall clock by default; the simulator's in virtual time)."""

    def __init__(self, timeout_s: float = 3600.0, poll_s: float = 1.0, key: str = "faults.wait_timeout_s",
                 runtime=RAY):
        self.runtime = runtime
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.key = key
        self.tick: Callable[[], None] | None = None
        self.describe: Callable[[], str] | None = None  # what the supervisor sees, added to a deadline's error
        self._ticking = False

    def supervise_with(self, tick: Callable[[], None], describe: Callable[[], str] | None = None) -> None:
        """`tick` runs every poll_s while the driver waits (the supervisor brings dead workers back there);
        `describe` adds what it sees to a deadline's error. The supervisor calls this once it exists: it waits
        through this very waiter, so neither can be made with the other."""
        self.tick, self.describe = tick, describe

    @classmethod
    def from_config(cls, faults, runtime=RAY) -> "Waiter":
        return cls(faults.wait_timeout_s, faults.poll_s, runtime=runtime)

    def get(self, refs: ray.ObjectRef | Sequence[ray.ObjectRef], what: str, timeout_s: float | None = None) -> Any:
        """The results of `refs` (one ref or a list), as `ray.get`; raises DeadlineExceeded after the deadline, and
        a call's own error (e.g. RayActorError) once every call has finished."""
        rt = self.runtime
        single = rt.is_ref(refs)
        refs = [refs] if single else list(refs)
        pending, total = refs, len(refs)
        deadline = self._deadline(timeout_s)
        while pending:
            _, pending = rt.wait(pending, num_returns=len(pending), timeout=self._slice(deadline))
            if pending:
                self._after_slice(deadline, what, f"{len(pending)} of {total} calls still running", timeout_s)
        out = rt.get(refs)
        return out[0] if single else out

    def first(self, refs: Sequence[ray.ObjectRef], what: str, timeout_s: float | None = None) -> ray.ObjectRef:
        """The first of `refs` to finish (its result or its error is then ready for `ray.get`)."""
        deadline = self._deadline(timeout_s)
        while True:
            done, _ = self.runtime.wait(list(refs), num_returns=1, timeout=self._slice(deadline))
            if done:
                return done[0]
            self._after_slice(deadline, what, f"none of {len(refs)} calls finished", timeout_s)

    def pause(self, seconds: float) -> None:
        """Sleeps while ticking (a driver-side back-off that keeps supervising)."""
        end = self.runtime.now() + seconds
        while (left := end - self.runtime.now()) > 0:
            self.runtime.sleep(min(left, self.poll_s))
            self.run_tick()

    def run_tick(self) -> None:
        """One supervision round; not re-entered from inside itself (a tick that waits ticks nothing)."""
        if self.tick is None or self._ticking:
            return
        self._ticking = True
        try:
            self.tick()
        finally:
            self._ticking = False

    def _deadline(self, timeout_s: float | None) -> float:
        return self.runtime.now() + (self.timeout_s if timeout_s is None else timeout_s)

    def _slice(self, deadline: float) -> float:
        return max(0.0, min(self.poll_s, deadline - self.runtime.now()))

    def _after_slice(self, deadline: float, what: str, state: str, timeout_s: float | None) -> None:
        if self.runtime.now() >= deadline:
            limit = self.timeout_s if timeout_s is None else timeout_s
            where = self.key if timeout_s is None else "its own deadline"
            seen = self.describe() if self.describe is not None else ""
            raise DeadlineExceeded(f"{what}: no result within {limit:g}s ({where}); {state}"
                                   + (f"; not answering: {seen}" if seen else ""))
        self.run_tick()
