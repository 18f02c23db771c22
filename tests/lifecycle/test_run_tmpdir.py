"""A run's temp dir (rlvr/lifecycle/run_tmpdir.py) with real processes: the driver's temp files and its
children's land in it, and it is gone when the driver ends, whether it exits or is SIGKILLed (as a driver's wandb
staging dirs were not)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.lifecycle.runwatch import wait_gone

DRIVER = r"""
import subprocess, sys, tempfile, time
from rlvr.lifecycle.run_tmpdir import use_run_tmpdir
run_tmp = use_run_tmpdir()
own = tempfile.mkdtemp(prefix="staging-")  # as wandb stages a logged table
child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.mkdtemp(prefix='child-'))"],
                       capture_output=True, text=True, check=True).stdout.strip()  # as Ray's workers, vLLM's engine
print(run_tmp, own, child, flush=True)
if sys.argv[1] == "exit":
    sys.exit(0)
time.sleep(600)
"""


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_a_drivers_temp_files_and_its_childrens_go_with_it(how):
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, how], stdout=subprocess.PIPE, text=True)
    run_tmp, own, child = driver.stdout.readline().split()
    try:
        assert os.path.basename(run_tmp).startswith(f"rlvr-run-{driver.pid}-")
        assert os.path.dirname(own) == run_tmp and os.path.dirname(child) == run_tmp
        if how == "sigkill":
            driver.send_signal(signal.SIGKILL)
        driver.wait(60)
        assert wait_gone({}, timeout_s=30, also=lambda: os.path.exists(run_tmp)) == []
        assert not os.path.exists(run_tmp)
    finally:
        driver.kill()
