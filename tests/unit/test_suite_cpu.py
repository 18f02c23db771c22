"""bench/suite_cpu.py's arithmetic: the busy share between two instants from /proc/stat samples, tests paired from
the plugin's start and end lines, and the per-group table (a test too short to sample counts at the run's mean)."""

from __future__ import annotations

import pytest

from tests.helpers.bench_modules import load_bench


@pytest.fixture(scope="module")
def suite_cpu():
    return load_bench("suite_cpu")


# (time, busy jiffies, total jiffies): 0-10 s the machine is fully busy, 10-20 s a quarter busy
SAMPLES = [(0.0, 0, 0), (10.0, 200, 200), (20.0, 250, 400)]


def test_busy_share_between_samples(suite_cpu):
    assert suite_cpu.busy_share(SAMPLES, 0.0, 10.0) == 1.0
    assert suite_cpu.busy_share(SAMPLES, 5.0, 20.0) == 0.25
    assert suite_cpu.busy_share(SAMPLES, 0.0, 20.0) == 0.625
    assert suite_cpu.busy_share(SAMPLES, 11.0, 19.0) is None


def test_intervals_pair_starts_with_ends_and_drop_unfinished(suite_cpu):
    lines = ["0.00\tstart\ttests/unit/a.py::t", "10.00\tend\ttests/unit/a.py::t",
             "10.00\tstart\ttests/e2e/b.py::t[x\ty]", "20.00\tend\ttests/e2e/b.py::t[x\ty]",
             "20.00\tstart\ttests/e2e/b.py::killed"]
    assert suite_cpu.test_intervals(lines) == [("tests/unit/a.py::t", 0.0, 10.0),
                                               ("tests/e2e/b.py::t[x\ty]", 10.0, 20.0)]


def test_groups_weigh_by_wall_and_fill_short_tests_with_the_mean(suite_cpu):
    intervals = [("tests/unit/a.py::t", 0.0, 10.0), ("tests/e2e/b.py::t", 10.0, 20.0),
                 ("tests/e2e/b.py::short", 12.0, 13.0)]
    rows = suite_cpu.grouped(intervals, SAMPLES, lambda n: n.split("/")[1])
    assert rows[0][0] == "e2e" and rows[0][1] == 11.0 and rows[0][3] == 2
    assert rows[0][2] == pytest.approx((0.25 * 10 + 0.625 * 1) / 11)
    assert rows[1] == ("unit", 10.0, 1.0, 1)
