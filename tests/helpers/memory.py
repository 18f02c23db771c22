"""Peak resident memory of a set of processes, sampled in a thread while a test runs (for reports, and for
bounds that a leak per request would break)."""

from __future__ import annotations

import threading

import psutil


class PeakRSS:
    """with PeakRSS([pid, ...]) as m: ...  ->  m.baseline_mb, m.peak_mb, m.growth_mb (peak minus baseline),
    summed over the processes and their children (`children=False`: the processes alone, e.g. a driver whose
    children are the whole Ray cluster)."""

    def __init__(self, pids: list[int], interval_s: float = 0.02, children: bool = True):
        self.procs = [psutil.Process(pid) for pid in pids]
        self.children = children
        self.interval_s = interval_s
        self.baseline_mb = self.peak_mb = 0.0
        self._stop = threading.Event()

    def sample_mb(self) -> float:
        total = 0
        for proc in self.procs:
            for p in [proc, *(proc.children(recursive=True) if self.children else [])]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
        return total / 2**20

    def __enter__(self) -> "PeakRSS":
        self.baseline_mb = self.peak_mb = self.sample_mb()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._halt()

    @property
    def growth_mb(self) -> float:
        return self.peak_mb - self.baseline_mb

    def _halt(self) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, self.sample_mb())

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak_mb = max(self.peak_mb, self.sample_mb())
