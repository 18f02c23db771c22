"""The reward contract (DESIGN.md, Rewards): a subclass says how to score one sample, the base class makes
every call safe: bounded concurrency, a deadline per call, bounded retries, and metrics per domain.

Writing a new reward::

    from rlvr.workers.rewards.base import RewardLimits, RewardWorker
    from rlvr.workers.rewards.result import RewardResult

    class ExactMatchRewardWorker(RewardWorker):
        def score(self, sample):  # a plain def runs in a thread; write `async def` for I/O-bound checks
            correct = sample.response_text.strip() == str(sample.prompt.ground_truth).strip()
            return RewardResult(reward=float(correct), correct=correct, parts={"answer": float(correct)})

    worker = ExactMatchRewardWorker("my_domain", RewardLimits(timeout_s=10))
    result = await worker.evaluate(sample)  # never raises: a failure comes back with status != "ok"

Raise `TransientRewardError` for failures worth retrying (rate limits, dropped connections). CPU-bound checks
that may hang belong in a `KillableProcessPool` (process_pool.py): a thread that hangs cannot be stopped.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import inspect
import logging
import math
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rlvr.data.reward_result import STATUSES, RewardResult

logger = logging.getLogger(__name__)


@dataclass
class RewardLimits:
    max_concurrency: int = 16  # score() calls in flight at once, per worker
    timeout_s: float = 30.0  # deadline for one score() attempt
    max_retries: int = 2  # extra attempts after a `retry_on` error
    retry_backoff_s: float = 0.5  # sleep before retry k (k = 0, 1, ...) is retry_backoff_s * 2**k
    val_max_concurrency: int | None = None  # slots of the validation lane; None: max_concurrency


class TransientRewardError(Exception):
    """Raised by `score` for a failure that may go away if tried again (rate limit, connection reset)."""


class RewardWorker(abc.ABC):
    """Base class of every reward; see the module docstring for how to write one."""

    # Exception types that earn a retry; a subclass may widen this (e.g. with its HTTP client's errors).
    retry_on: tuple[type[BaseException], ...] = (TransientRewardError,)

    def __init__(self, domain: str, limits: RewardLimits | None = None) -> None:
        self.domain = domain
        self.limits = limits or RewardLimits()
        self._score_is_async = inspect.iscoroutinefunction(type(self).score)
        # A plain-def score gets threads of its own rather than the loop's default executor (a handful of
        # threads shared with everything else in the process): calls queued there would eat their deadline.
        self._threads = (
            None
            if self._score_is_async
            else ThreadPoolExecutor(self.limits.max_concurrency, thread_name_prefix=f"reward-{domain}")
        )
        # One semaphore per lane ("train", "val"): validation never queues behind training rewards nor takes
        # their slots. asyncio primitives belong to one event loop; made on first use (no loop needed here).
        self._lanes: dict[str, asyncio.Semaphore] = {}
        self._lanes_loop: asyncio.AbstractEventLoop | None = None
        self._in_flight = 0
        self.reset_metrics()

    @abc.abstractmethod
    def score(self, sample: Any) -> RewardResult:
        """Scores one sample (`async def` or plain `def` in subclasses). May raise: evaluate() turns exceptions
        into a status. A subclass without it cannot be instantiated (TypeError naming score)."""

    async def evaluate(self, sample: Any, lane: str = "train") -> RewardResult:
        """Scores `sample` under the limits. Never raises (only cancellation propagates) and never hangs: each
        attempt gets `limits.timeout_s`. `latency_s` is the wall time from getting a concurrency slot of `lane`
        to the final result, retries and backoff included (time queued for a slot is not in it)."""
        clock = asyncio.get_running_loop()  # the loop's clock: wall time, or simulated time under rlvr/sim
        async with self._slot(lane):
            self._in_flight += 1
            self._in_flight_peak = max(self._in_flight_peak, self._in_flight)
            start = clock.time()
            try:
                result = await self._attempts(sample)
            finally:
                self._in_flight -= 1
        # A copy: a subclass may return a shared constant result.
        result = dataclasses.replace(result, latency_s=clock.time() - start)
        if lane == "train":  # the latency metrics describe the training lane (they feed the reward floor)
            self._latencies.append(result.latency_s)
        else:
            self._lane_calls[lane] += 1
        self._status_counts[result.status] += 1
        return result

    def metrics(self) -> dict[str, float]:
        """Counters since the last reset_metrics(); keys are relative: the caller prefixes `<domain>/reward/`.
        Latency percentiles are 0.0 when nothing was scored."""
        latencies = sorted(self._latencies)
        out = {
            "latency/p50": _percentile(latencies, 0.50),
            "latency/p95": _percentile(latencies, 0.95),
            "latency/max": latencies[-1] if latencies else 0.0,
            "latency/mean": sum(latencies) / len(latencies) if latencies else 0.0,
            "calls": float(len(latencies)),
        }
        out.update({f"{lane}/calls": float(n) for lane, n in self._lane_calls.items()})
        out.update({f"status/{s}": float(self._status_counts[s]) for s in STATUSES})
        out["in_flight"] = float(self._in_flight)
        out["in_flight_peak"] = float(self._in_flight_peak)
        out["retries"] = float(self._retries)
        return out

    def reset_metrics(self) -> None:
        self._latencies: list[float] = []
        self._lane_calls: Counter[str] = Counter()
        self._status_counts: Counter[str] = Counter()
        self._retries = 0
        self._in_flight_peak = self._in_flight

    def health(self) -> dict[str, Any]:
        """What the worker runs besides its own process (e.g. {"sandbox_pid": ...} of a server it started), for
        supervision and fault-injection tests; {} for a worker that runs nothing."""
        return {}

    def close(self) -> None:
        """Releases what the worker holds; subclasses that own pools close them and call super().close()."""
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)

    def _slot(self, lane: str) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._lanes_loop is not loop:
            self._lanes, self._lanes_loop = {}, loop
        if lane not in self._lanes:
            slots = self.limits.val_max_concurrency if lane == "val" else None
            self._lanes[lane] = asyncio.Semaphore(slots or self.limits.max_concurrency)
        return self._lanes[lane]

    async def _attempts(self, sample: Any) -> RewardResult:
        attempt = 0
        while True:
            try:
                value = await asyncio.wait_for(self._score_once(sample), self.limits.timeout_s)
            except Exception as e:  # CancelledError is a BaseException: it propagates, as it must
                if isinstance(e, self.retry_on) and attempt < self.limits.max_retries:
                    self._retries += 1
                    await asyncio.sleep(self.limits.retry_backoff_s * 2**attempt)
                    attempt += 1
                    continue
                return self._failure(e, attempts=attempt + 1)
            return _checked(value)

    async def _score_once(self, sample: Any) -> Any:
        if self._score_is_async:
            return await self.score(sample)
        return await asyncio.get_running_loop().run_in_executor(self._threads, self.score, sample)

    def _failure(self, e: Exception, attempts: int) -> RewardResult:
        logger.debug("reward %s: score failed", self.domain, exc_info=e)
        # TimeoutError covers our own deadline (asyncio.wait_for), the process pool's, and socket timeouts.
        if isinstance(e, TimeoutError):
            info = _describe(e) if str(e) else f"no result within {self.limits.timeout_s}s"
            return RewardResult.failed("timeout", info)
        info = _describe(e)
        if attempts > 1:
            info += f" (attempt {attempts} of {self.limits.max_retries + 1})"
        return RewardResult.failed("error", info)


def _checked(value: Any) -> RewardResult:
    """A score that returns garbage is reported as "invalid", not trusted and not crashed on."""
    if not isinstance(value, RewardResult):
        return RewardResult.failed("invalid", f"score returned {type(value).__name__}, not RewardResult")
    if value.status not in STATUSES:
        return RewardResult.failed("invalid", f"score returned unknown status {value.status!r}")
    if value.status == "ok":
        try:
            finite = math.isfinite(value.reward)
        except TypeError:
            finite = False
        if not finite:
            return RewardResult.failed("invalid", f"score returned reward {value.reward!r}, not a finite number")
    return value


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:300]


def _percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile: always one of the observed values."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]
