"""A CLI run (tiny random model, local Ray) that crashes in its second step: the worker's error reaches the console
with the worker named, the worker output is in <run>/logs/, and `python -m rlvr.report` reports the crashed run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlvr.report.plots import PLOTS
from tests.conftest import REPO, tiny_config

pytestmark = pytest.mark.slow


def test_a_run_that_crashes_is_reported(tiny_model_dir, tmp_path):
    tree = tiny_config(tiny_model_dir, str(tmp_path / "runs"),
                       run={"max_steps": 3, "progress_bar": True},
                       rollout={"filter": {"user_fn": "tests.helpers.crash_filter.crash_from_step_1"}})
    config = tmp_path / "crash.yaml"
    config.write_text(yaml.safe_dump(tree))
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "rlvr.start", "--config", str(config), "ray.num_cpus=2"], cwd=REPO,
                          capture_output=True, text=True, env=env, timeout=600)
    console = proc.stdout + proc.stderr
    assert proc.returncode != 0, console[-3000:]
    # the worker's exception, with the worker that raised it, and where the report of the crashed run is
    assert "InjectedCrash: injected crash in the user filter" in console
    assert re.search(r"DynamicSamplingScheduler|Scheduler\[(arithmetic|word_problems)\]", console), console[-3000:]
    match = re.search(r"its report so far: python -m rlvr.report (\S+)", console)
    assert match, console[-3000:]
    run_dir = Path(match.group(1))
    assert (run_dir / "logs" / "driver.log").exists()
    worker_logs = "".join(p.read_text() for p in (run_dir / "logs" / "workers").glob("Scheduler_*.log"))
    assert "InjectedCrash" in worker_logs  # the whole traceback, in the log of the worker that raised it

    report = subprocess.run([sys.executable, "-m", "rlvr.report", str(run_dir)], cwd=REPO, capture_output=True,
                            text=True, env=env, timeout=300)
    assert report.returncode == 0, report.stderr
    assert "stopped after step 1 of 3 (crashed or interrupted)" in report.stdout
    for domain in ("arithmetic", "word_problems", "all"):
        assert re.search(rf"^{domain}\s+\d\.\d{{3}} -> \d\.\d{{3}}", report.stdout, re.M), report.stdout
    written = {p.stem for p in (run_dir / "report").glob("*.png")}
    assert {"val_correct", "train_reward", "response_length", "time_per_phase"} <= written <= set(PLOTS)
    assert (run_dir / "report" / "index.html").exists()
