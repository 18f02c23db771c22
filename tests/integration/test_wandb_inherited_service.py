"""A driver started by a process that runs its own W&B service (a notebook, a sweep runner, a test runner) inherits
WANDB_SERVICE. Were the driver to use that service, a SIGKILLed driver's run would stay registered there and
`run.resume=latest` would be refused with "run ID ... is in use" (the CI failure of stop 17). Real wandb, offline;
the parent and both drivers are real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.helpers.own_tmpdir import own_tmpdir

DRIVER = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from rlvr.config.run import TrackersConfig
    from rlvr.telemetry.trackers import Trackers

    run_dir, resume = Path(sys.argv[1]), int(sys.argv[2])
    trackers = Trackers(TrackersConfig(jsonl=False, tensorboard=False, wandb_mode="offline"), run_dir, "run",
                        {}, run_id="inherited01", resume_step=resume or None)
    for step in range(resume, 3):
        trackers.log({"loss": float(step)}, step)
    if not resume:
        os.kill(os.getpid(), 9)  # killed with its run open
    trackers.close()
""")

PARENT = textwrap.dedent("""
    import os, subprocess, sys
    import wandb

    wandb.setup()  # this process's service; its token is now in os.environ for every child
    assert os.environ.get("WANDB_SERVICE"), "wandb no longer exports its service to children"
    driver, run_dir = sys.argv[1], sys.argv[2]
    killed = subprocess.run([sys.executable, "-c", driver, run_dir, "0"])
    assert killed.returncode == -9, killed.returncode
    resumed = subprocess.run([sys.executable, "-c", driver, run_dir, "2"], capture_output=True, text=True)
    print(resumed.stderr[-3000:], file=sys.stderr)
    wandb.teardown()
    sys.exit(resumed.returncode)
""")


def test_killed_driver_resumes_although_its_parent_runs_a_wandb_service(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with own_tmpdir() as (tmp, tmp_env):  # the killed driver's wandb staging dirs stay behind: not in /tmp
        done = subprocess.run([sys.executable, "-c", PARENT, DRIVER, str(run_dir)], capture_output=True, text=True,
                              timeout=300, env={**os.environ, "WANDB_SILENT": "true", **tmp_env})
        assert done.returncode == 0, done.stderr[-4000:]
        assert list(tmp.glob("*wandb-media")), "the killed driver's staging dir should have landed here"
    offline = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 2, offline  # the killed run and the resumed one
