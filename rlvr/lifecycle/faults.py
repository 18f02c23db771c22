"""Named fault points for tests of crash safety: `RLVR_FAULT=<point>@<step>` SIGKILLs this process when the
code reaches `fault_point(<point>, <step>)`, e.g. `RLVR_FAULT=checkpoint.before_commit@4` kills the driver
inside the save of step 4, after its files are written and before the checkpoint is committed.

A SIGKILL, not an exception: nothing of the process's own cleanup runs, as when a node is preempted.
Unset (always, outside tests), a fault point costs one environment lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "RLVR_FAULT"


def fault_point(name: str, step: int | None = None) -> None:
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    point, _, at = wanted.partition("@")
    if point == name and (not at or (step is not None and int(at) == step)):
        os.kill(os.getpid(), signal.SIGKILL)
