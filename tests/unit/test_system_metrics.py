"""system/... metrics: CPU utilisation between samples, memory of a process tree, tokens/s."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from rlvr.telemetry.system_metrics import (GIB, ProcessSample, cpu_percent, sample_process, throughput_metrics,
                                           worker_metrics)


def test_cpu_percent_by_hand():
    before = ProcessSample(rss_bytes=0, cpu_seconds=10.0, wall=100.0)
    assert cpu_percent(before, ProcessSample(0, 13.0, 102.0)) == pytest.approx(150.0)  # 3 CPU-s in 2 s
    assert cpu_percent(before, ProcessSample(0, 9.0, 102.0)) == 0.0  # a child ended, taking its seconds
    assert cpu_percent(before, ProcessSample(0, 12.0, 100.0)) == 0.0  # no time passed


def test_worker_metrics_names_and_units():
    s = ProcessSample(rss_bytes=1.5 * GIB, cpu_seconds=4.0, wall=10.0, gpu_mem_bytes=2 * GIB, gpu_util_percent=80.0)
    assert worker_metrics("actor_train/0", s, None) == {"system/actor_train/0/rss_gib": 1.5,
                                                          "system/actor_train/0/gpu_mem_gib": 2.0,
                                                          "system/actor_train/0/gpu_util_percent": 80.0}
    with_cpu = worker_metrics("reward/math/0", ProcessSample(GIB, 5.0, 12.0), ProcessSample(GIB, 4.0, 10.0))
    assert with_cpu == {"system/reward/math/0/rss_gib": 1.0, "system/reward/math/0/cpu_percent": 50.0}


def test_throughput_by_hand():
    assert throughput_metrics({"batch/response_tokens": 600.0, "time/train": 3.0}) == {
        "system/train_tokens_per_s": 200.0}
    assert throughput_metrics({"batch/response_tokens": 600.0}) == {}  # no training phase (a skipped step)


def test_a_process_tree_counts_its_children():
    child = subprocess.Popen([sys.executable, "-c", "x = bytearray(64 << 20); import time; time.sleep(30)"])
    try:
        for _ in range(100):  # until the child holds its 64 MiB
            alone, tree = sample_process(children=False), sample_process()
            if tree.rss_bytes - alone.rss_bytes > 60 * (1 << 20):
                break
            time.sleep(0.05)
        assert tree.rss_bytes - alone.rss_bytes > 60 * (1 << 20)
        assert tree.cpu_seconds >= alone.cpu_seconds > 0
    finally:
        child.kill()
        child.wait()
