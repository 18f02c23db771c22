"""Worker output on a real local Ray behind the CLI's console: quiet by default (third-party lines only in the
worker's log file), our warnings and every error on the console with the worker named; --verbose shows it all."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def probe(tmp_path, *flags: str) -> tuple[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "tests.helpers.console_probe", str(tmp_path), *flags], cwd=REPO,
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pid = re.search(r"worker pid (\d+)", proc.stdout).group(1)
    log = (tmp_path / "logs" / "workers" / f"NoisyWorkerForTest-{pid}.log").read_text()
    return proc.stdout + proc.stderr, log


def test_quiet_console_and_the_worker_log(tmp_path):
    console, log = probe(tmp_path)
    name = r"\(NoisyWorkerForTest pid=\d+\) "
    assert re.search(name + "WARNING rlvr.workers.fake: our own warning", console)
    assert re.search(name + "ERROR some_library: a library error", console)
    assert "a third-party warning" not in console and "a plain third-party print" not in console
    assert "Token authentication" not in console and "Started a local Ray instance" not in console  # Ray's own
    # everything is in the worker's log, in the format the worker_process_setup_hook set
    for line in ("WARNING vllm.engine.fake: a third-party warning", "a plain third-party print",
                 "WARNING rlvr.workers.fake: our own warning", "ERROR some_library: a library error"):
        assert line in log
    assert "Started a local Ray instance" in (tmp_path / "logs" / "driver.log").read_text()


def test_verbose_shows_third_party_output(tmp_path):
    console, _ = probe(tmp_path, "--verbose")
    assert re.search(r"\(NoisyWorkerForTest pid=\d+\) WARNING vllm.engine.fake: a third-party warning", console)
    assert re.search(r"\(NoisyWorkerForTest pid=\d+\) a plain third-party print", console)
    assert "Started a local Ray instance" in console
