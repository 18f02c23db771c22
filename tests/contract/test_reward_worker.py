"""The RewardWorker contract: evaluate() never raises, never hangs, and counts what happened."""

import asyncio
import math
import threading
import time

import pytest

from rlvr.data.reward_result import STATUSES, RewardResult
from rlvr.data.types import Prompt, Sample
from rlvr.workers.rewards.base import RewardLimits, RewardWorker, TransientRewardError
from rlvr.workers.rewards.process_pool import RewardTimeoutError

FAST = RewardLimits(max_concurrency=4, timeout_s=0.3, max_retries=2, retry_backoff_s=0.01)


def make_sample(text="42", ground_truth="42"):
    prompt = Prompt(uid="p0", domain="test", ground_truth=ground_truth, text="q")
    return Sample(
        prompt=prompt, group_id="g0", index=0, response_ids=[], response_text=text, finish_reason="stop",
        policy_version=0,
    )


class Returns(RewardWorker):
    """Returns whatever it was built with."""

    def __init__(self, value, limits=FAST):
        super().__init__("test", limits)
        self.value = value

    async def score(self, sample):
        return self.value


class Raises(RewardWorker):
    def __init__(self, error, limits=FAST):
        super().__init__("test", limits)
        self.error = error

    async def score(self, sample):
        raise self.error


class Hangs(RewardWorker):
    async def score(self, sample):
        await asyncio.sleep(3600)


class Flaky(RewardWorker):
    def __init__(self, failures, limits=FAST):
        super().__init__("test", limits)
        self.failures = failures
        self.calls = 0

    async def score(self, sample):
        self.calls += 1
        if self.calls <= self.failures:
            raise TransientRewardError("rate limited")
        return RewardResult(reward=1.0, correct=True)


class Plain(RewardWorker):
    """A plain-def score: runs in a thread, not on the event loop."""

    def score(self, sample):
        self.thread = threading.current_thread()
        correct = sample.response_text == str(sample.prompt.ground_truth)
        return RewardResult(reward=float(correct), correct=correct)


def evaluate(worker, sample=None):
    return asyncio.run(worker.evaluate(sample or make_sample()))


def test_ok_result_passes_through_with_latency():
    result = evaluate(Returns(RewardResult(reward=0.5, correct=False, parts={"answer": 0.5})))
    assert (result.status, result.reward, result.correct, result.parts) == ("ok", 0.5, False, {"answer": 0.5})
    assert result.latency_s > 0


def test_exception_is_error_with_short_info():
    result = evaluate(Raises(ValueError("boom")))
    assert result.status == "error"
    assert result.info == "ValueError: boom"
    assert math.isnan(result.reward) and result.correct is None


def test_hang_is_timeout_at_the_deadline():
    start = time.perf_counter()
    result = evaluate(Hangs("test", FAST))
    assert result.status == "timeout"
    assert time.perf_counter() - start < 30  # ended by the 0.3 s deadline, not by the hour-long hang


def test_hanging_plain_def_is_timeout():
    class SlowPlain(RewardWorker):
        def score(self, sample):
            time.sleep(1.0)  # a thread cannot be killed: it finishes in the background

    worker = SlowPlain("test", FAST)
    start = time.perf_counter()
    assert evaluate(worker).status == "timeout"
    assert time.perf_counter() - start < FAST.timeout_s + 0.5
    worker.close()


def test_timeout_error_from_score_is_timeout():
    result = evaluate(Raises(RewardTimeoutError("pool deadline")))
    assert (result.status, result.info) == ("timeout", "RewardTimeoutError: pool deadline")


@pytest.mark.parametrize(
    "value",
    [RewardResult(reward=math.nan), RewardResult(reward=math.inf), RewardResult(reward="1"), 1.0, None],
    ids=["nan", "inf", "str-reward", "float", "none"],
)
def test_bad_return_value_is_invalid(value):
    assert evaluate(Returns(value)).status == "invalid"


def test_failed_result_from_score_keeps_its_status():
    worker = Returns(RewardResult.failed("timeout", "verifier gave up"))
    result = evaluate(worker)
    assert (result.status, result.info) == ("timeout", "verifier gave up")
    assert worker.metrics()["status/timeout"] == 1


def test_transient_errors_are_retried():
    worker = Flaky(failures=2)
    result = evaluate(worker)
    assert result.status == "ok" and worker.calls == 3
    assert worker.metrics()["retries"] == 2


def test_retries_are_bounded():
    worker = Flaky(failures=10)
    result = evaluate(worker)
    assert result.status == "error" and worker.calls == FAST.max_retries + 1
    assert result.info == "TransientRewardError: rate limited (attempt 3 of 3)"


def test_other_errors_are_not_retried():
    worker = Raises(KeyError("x"))
    evaluate(worker)
    assert worker.metrics()["retries"] == 0


def test_plain_def_score_runs_in_a_thread():
    worker = Plain("test", FAST)
    assert evaluate(worker).correct is True
    assert evaluate(worker, make_sample(text="41")).correct is False
    assert worker.thread is not threading.main_thread()
    worker.close()


def test_concurrency_limit_is_never_exceeded():
    class Slow(RewardWorker):
        active = peak = 0

        async def score(self, sample):
            Slow.active += 1
            Slow.peak = max(Slow.peak, Slow.active)
            await asyncio.sleep(0.02)
            Slow.active -= 1
            return RewardResult(reward=1.0)

    worker = Slow("test", RewardLimits(max_concurrency=3, timeout_s=2.0))

    async def many():
        return await asyncio.gather(*(worker.evaluate(make_sample()) for _ in range(20)))

    results = asyncio.run(many())
    assert all(r.status == "ok" for r in results)
    assert Slow.peak == 3
    metrics = worker.metrics()
    assert metrics["in_flight_peak"] == 3 and metrics["in_flight"] == 0


def test_cancellation_propagates_and_frees_the_slot():
    worker = Hangs("test", RewardLimits(timeout_s=60))

    async def cancel_one():
        task = asyncio.create_task(worker.evaluate(make_sample()))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_one())
    assert worker.metrics()["in_flight"] == 0


def test_metrics_keys_and_reset():
    worker = Returns(RewardResult(reward=1.0))
    empty = worker.metrics()
    expected = {"latency/p50", "latency/p95", "latency/max", "latency/mean", "calls", "in_flight",
                "in_flight_peak", "retries"}
    expected |= {f"status/{s}" for s in STATUSES}
    assert set(empty) == expected
    assert all(v == 0.0 for v in empty.values())

    for _ in range(3):
        evaluate(worker)
    evaluate(Returns(None))  # another worker: its counts must not leak in
    metrics = worker.metrics()
    assert metrics["status/ok"] == 3 and metrics["status/invalid"] == 0
    assert 0 < metrics["latency/p50"] <= metrics["latency/p95"] <= metrics["latency/max"]
    assert metrics["calls"] == 3 and 0 < metrics["latency/mean"] <= metrics["latency/max"]

    worker.reset_metrics()
    assert all(v == 0.0 for v in worker.metrics().values())


def test_validation_lane_has_its_own_slots():
    """Validation must not queue behind a full training lane (nor take its slots)."""

    class Gate(RewardWorker):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.release = asyncio.Event()

        async def score(self, sample):
            if sample == "train":
                await self.release.wait()
            return RewardResult(reward=1.0)

    async def scenario():
        worker = Gate("d", RewardLimits(max_concurrency=2, val_max_concurrency=1, timeout_s=5))
        training = [asyncio.create_task(worker.evaluate("train")) for _ in range(3)]  # 2 in, 1 queued
        await asyncio.sleep(0.05)
        assert worker.metrics()["in_flight"] == 2
        val = await asyncio.wait_for(worker.evaluate("val", lane="val"), timeout=2)  # not behind the queue
        worker.release.set()
        results = await asyncio.gather(*training)
        return val, results, worker.metrics()

    val, results, metrics = asyncio.run(scenario())
    assert val.status == "ok" and all(r.status == "ok" for r in results)
    assert metrics["calls"] == 3 and metrics["val/calls"] == 1  # latency metrics describe the training lane
