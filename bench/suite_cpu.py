"""Where the test suite's time goes: the README's test command (or any pytest arguments) with the whole machine's
CPU sampled every 2 s and each test's start and end logged, then wall seconds and mean CPU use per tier and module.
It answers whether the suite waits (idle cores: run tests side by side, shorten polls) or works (busy cores: only
less work helps). Linux only (/proc/stat). Heavy: run it under the machine-wide lock.

    flock /tmp/rlvr-heavy.lock .venv/bin/python bench/suite_cpu.py            # the whole suite
    .venv/bin/python bench/suite_cpu.py tests/integration/test_overlap.py      # one module
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot; iowait counts as idle."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    return user + nice + system + irq + softirq + steal, sum(fields)


def busy_share(samples: list[tuple[float, int, int]], start: float, end: float) -> float | None:
    """Share of the machine's CPU (0..1) busy between start and end, from the samples taken inside the interval;
    None when fewer than two fall inside (a test shorter than the sampling period)."""
    inside = [s for s in samples if start <= s[0] <= end]
    if len(inside) < 2 or inside[-1][2] == inside[0][2]:
        return None
    return (inside[-1][1] - inside[0][1]) / (inside[-1][2] - inside[0][2])


def test_intervals(timeline: list[str]) -> list[tuple[str, float, float]]:
    """(node id, start, end) per finished test from the plugin's lines."""
    starts, out = {}, []
    for line in timeline:
        t, kind, node = line.split("\t", 2)
        if kind == "start":
            starts[node] = float(t)
        elif node in starts:
            out.append((node, starts.pop(node), float(t)))
    return out


def grouped(intervals, samples, key) -> list[tuple[str, float, float, int]]:
    """(group, wall seconds, mean busy share weighted by wall, tests) per group, longest first; tests too short to
    sample count at the machine's mean over the whole run."""
    whole = busy_share(samples, samples[0][0], samples[-1][0]) or 0.0
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for node, a, b in intervals:
        share = busy_share(samples, a, b)
        g = acc[key(node)]
        g[0] += b - a
        g[1] += (whole if share is None else share) * (b - a)
        g[2] += 1
    return sorted(((k, w, bw / w if w else 0.0, n) for k, (w, bw, n) in acc.items()), key=lambda r: -r[1])


def main() -> None:
    args = sys.argv[1:] or ["-q"]
    cores = os.cpu_count() or 1
    samples: list[tuple[float, int, int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append((time.time(), *cpu_jiffies()))
            done.wait(2.0)

    with tempfile.TemporaryDirectory() as tmp:
        timeline = Path(tmp) / "timeline.tsv"
        env = {**os.environ, "TEST_TIMELINE_OUT": str(timeline),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "bench" / "suite_cpu_plugin"),
                                                           os.environ.get("PYTHONPATH")]))}
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        rc = subprocess.call([sys.executable, "-m", "pytest", "-p", "timeline_plugin", *args], cwd=REPO, env=env)
        done.set()
        sampler.join()
        intervals = test_intervals(timeline.read_text().splitlines()) if timeline.exists() else []
    if not intervals or len(samples) < 2:
        sys.exit(rc)
    wall = intervals[-1][2] - intervals[0][1]
    whole = busy_share(samples, intervals[0][1], intervals[-1][2]) or 0.0
    print(f"\nsuite {wall:.0f} s on {cores} cores, busy {100 * whole:.0f}% of the machine (pytest exit {rc})\n")
    for title, key in (("tier", lambda n: n.split("/")[1] if n.count("/") > 1 else n.split("::")[0]),
                       ("module", lambda n: n.split("::")[0])):
        rows = grouped(intervals, samples, key)[:25]
        print(f"| {title} | wall s | machine busy | tests |\n|---|---:|---:|---:|")
        for name, w, share, n in rows:
            print(f"| {name} | {w:.1f} | {100 * share:.0f}% | {n} |")
        print()
    sys.exit(rc)


if __name__ == "__main__":
    main()
