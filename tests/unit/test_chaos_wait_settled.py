"""The chaos injector's between-steps wait keeps the driver supervising: a server killed after a step's last
request comes back only through the driver's supervisor (a tick of its Waiter), so a wait that does not tick
waits for a recovery that cannot happen (bench/chaos.py stalled 10 minutes on a judge killed at a step's end)."""

from __future__ import annotations

from types import SimpleNamespace

from rlvr.runtime.waiter import Waiter
from tests.chaos.injector import Injector


def test_waiting_for_a_recovery_runs_the_supervisor():
    waiter = Waiter(timeout_s=60, poll_s=0.01)
    driver = SimpleNamespace(waiter=waiter, step=1)  # stands in for the pipeline: only what the wait reads
    injector = Injector(driver, [("judge", None, 1)])  # not started: the kill is not what this test is about
    ticks = []

    def supervise():  # the driver's supervisor restarts the killed server; the injector then sees it serve
        ticks.append(1)
        if len(ticks) == 3:
            with injector._settled:
                injector._pending -= 1
                injector._settled.notify_all()

    waiter.supervise_with(supervise)
    injector.wait_settled(2, timeout_s=30)
    assert injector._pending == 0 and len(ticks) == 3
