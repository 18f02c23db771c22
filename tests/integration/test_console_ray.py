"""Worker output on a real local Ray behind the CLI's console: quiet by default (third-party lines only in the
worker's log file), our warnings and every error on the console with the worker named; --verbose shows it all."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def start_probe(run_dir: Path, *flags: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-m", "tests.helpers.console_probe", str(run_dir), *flags], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.fixture(scope="module")
def probes(tmp_path_factory) -> dict[str, tuple[str, str, Path]]:
    """Both probes, quiet and --verbose, at once (each starts a Ray of its own: 11 s apiece one after the other):
    for each, what reached the console, the worker's log file and the run directory."""
    dirs = {mode: tmp_path_factory.mktemp(f"console-{mode}") for mode in ("quiet", "verbose")}
    procs = {"quiet": start_probe(dirs["quiet"]), "verbose": start_probe(dirs["verbose"], "--verbose")}
    out = {}
    try:
        for mode, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=300)
            assert proc.returncode == 0, stderr[-3000:]
            pid = re.search(r"worker pid (\d+)", stdout).group(1)
            log = (dirs[mode] / "logs" / "workers" / f"NoisyWorkerForTest-{pid}.log").read_text()
            out[mode] = (stdout + stderr, log, dirs[mode])
    finally:
        for proc in procs.values():
            proc.kill()  # one that hung past its timeout (a no-op for those that ended)
            proc.wait()
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
