"""A pytest plugin (`-p timeline_plugin`, its folder on PYTHONPATH) that writes each test's start and end wall time to
$TEST_TIMELINE_OUT: bench/suite_cpu.py lays the machine's CPU samples over it."""

import os
import time

_OUT = open(os.environ["TEST_TIMELINE_OUT"], "a", buffering=1)


def pytest_runtest_logstart(nodeid, location):
    _OUT.write(f"{time.time():.2f}\tstart\t{nodeid}\n")


def pytest_runtest_logfinish(nodeid, location):
    _OUT.write(f"{time.time():.2f}\tend\t{nodeid}\n")
