"""Worker output on a real local Ray behind the CLI's console: quiet by default (third-party lines only in the
worker's log file), our warnings and every error on the console with the worker named; --verbose shows it all."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers.at_once import run_at_once

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def probes(tmp_path_factory) -> dict[str, tuple[str, str, Path]]:
    """Both probes, quiet and --verbose, at once (each starts a Ray of its own: 11 s apiece one after the other):
    for each, what reached the console, the worker's log file and the run directory."""
    dirs = {mode: tmp_path_factory.mktemp(f"console-{mode}") for mode in ("quiet", "verbose")}
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    probe = [sys.executable, "-m", "tests.helpers.console_probe"]
    done = run_at_once({"quiet": [*probe, str(dirs["quiet"])], "verbose": [*probe, str(dirs["verbose"]), "--verbose"]},
                       300, cwd=REPO, env=env)
    out = {}
    for mode, proc in done.items():
        assert proc.returncode == 0, proc.stderr[-3000:]
        pid = re.search(r"worker pid (\d+)", proc.stdout).group(1)
        log = (dirs[mode] / "logs" / "workers" / f"NoisyWorkerForTest-{pid}.log").read_text()
        out[mode] = (proc.stdout + proc.stderr, log, dirs[mode])
    return out


def test_quiet_console_and_the_worker_log(probes):
    console, log, run_dir = probes["quiet"]
    name = r"\(NoisyWorkerForTest pid=\d+\) "
    assert re.search(name + "WARNING rlvr.workers.fake: our own warning", console)
    assert re.search(name + "ERROR some_library: a library error", console)
    assert "a third-party warning" not in console and "a plain third-party print" not in console
    assert "Token authentication" not in console and "Started a local Ray instance" not in console  # Ray's own
    # everything is in the worker's log, in the format the worker_process_setup_hook set
    for line in ("WARNING vllm.engine.fake: a third-party warning", "a plain third-party print",
                 "WARNING rlvr.workers.fake: our own warning", "ERROR some_library: a library error"):
        assert line in log
    assert "Started a local Ray instance" in (run_dir / "logs" / "driver.log").read_text()


def test_verbose_shows_third_party_output(probes):
    console, _, _ = probes["verbose"]
    assert re.search(r"\(NoisyWorkerForTest pid=\d+\) WARNING vllm.engine.fake: a third-party warning", console)
    assert re.search(r"\(NoisyWorkerForTest pid=\d+\) a plain third-party print", console)
    assert "Started a local Ray instance" in console
