"""Ray's workers import the rlvr the driver imported: a driver run from a second checkout (a git worktree, a copy)
on the same virtual environment, whose editable install points at the first, used to run its own code in the
driver and the first checkout's in every worker (found when a bench from a worktree measured main's trainer)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

PROBE = """
import sys
import ray, rlvr
from rlvr.config.load import config_from_dict
from rlvr.pipeline.build import start_ray
from rlvr.telemetry import console

if sys.argv[1] == "console":  # as the CLI runs: its worker set-up hook imports rlvr before the task does
    console.install(verbose=False).attach(sys.argv[2])
cfg = config_from_dict({"data": {"train_files": ["x.jsonl"]}, "ray": {"num_cpus": 1},
                        "domains": {"d": {"reward": {"worker": "x.Y"}}}})
start_ray(cfg)
try:
    @ray.remote(num_cpus=0)
    def where() -> str:
        import rlvr
        return rlvr.__file__
    print("driver", rlvr.__file__)
    print("worker", ray.get(where.remote()))
finally:
    ray.shutdown()
"""


@pytest.mark.parametrize("mode", ["console", "plain"])
def test_a_worker_imports_the_drivers_checkout(tmp_path, mode):
    copy = tmp_path / "second-checkout"
    shutil.copytree(REPO / "rlvr", copy / "rlvr", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", PROBE, mode, str(tmp_path / "run")], cwd=copy, env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("driver ", "worker ")))
    assert seen["driver"].startswith(str(copy)), seen  # the probe imports the copy (its working directory)
    assert seen["worker"] == seen["driver"], seen
