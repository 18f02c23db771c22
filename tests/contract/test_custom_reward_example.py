"""examples/custom_reward: the example RewardWorker meets the reward contract, and its config resolves it the
way the pipeline does (driver and Ray workers), from the repository root."""

import asyncio
import math
import threading
from pathlib import Path

import pytest

from examples.custom_reward.keyword_reward import KeywordLengthRewardWorker
from rlvr.config.load import load_config
from rlvr.data.reward_result import STATUSES
from rlvr.data.types import Prompt, Sample
from rlvr.workers.rewards.base import RewardLimits
from rlvr.workers.rewards.reward_actor import RewardActor, build_reward_worker, resolve_reward_class

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "examples/custom_reward/config.yaml"
WORKER_PATH = "examples.custom_reward.keyword_reward.KeywordLengthRewardWorker"


def make_sample(text, ground_truth="9", index=0):
    prompt = Prompt(uid="p0", domain="arithmetic", ground_truth=ground_truth, text="What is 3 plus 6?")
    return Sample(prompt=prompt, group_id="g0", index=index, response_ids=[], response_text=text,
                  finish_reason="stop", policy_version=0)


@pytest.fixture
def worker():
    worker = KeywordLengthRewardWorker("arithmetic", RewardLimits(max_concurrency=4, timeout_s=2.0),
                                       max_chars=40, length_penalty=0.5)
    yield worker
    worker.close()


def score(worker, text, ground_truth="9"):
    return asyncio.run(worker.evaluate(make_sample(text, ground_truth)))


@pytest.mark.parametrize(
    "text, ground_truth, reward, correct",
    [
        (r"3 plus 6 is \boxed{9}.", "9", 1.0, True),
        ("The answer is 9", 9, 1.0, True),  # ground truth of any type is compared as text
        ("It is 0.", 0, 1.0, True),  # a falsy ground truth is still one
        ("It is 19.", "9", 0.0, False),  # a whole number, not a digit inside another
        ("It is 9.5", "9", 0.0, False),
        ("no idea", "9", 0.0, False),
        ("9 " + "x" * 58, "9", 0.75, True),  # 60 chars: half-way to twice max_chars -> half the penalty
        ("9 " + "x" * 200, "9", 0.5, True),  # the penalty stops at length_penalty
        ("x" * 100, "9", -0.5, False),
    ],
)
def test_scores(worker, text, ground_truth, reward, correct):
    result = score(worker, text, ground_truth)
    assert (result.status, result.correct) == ("ok", correct), result.info
    assert result.reward == pytest.approx(reward)
    assert set(result.parts) == {"keyword", "length"}
    assert result.parts["keyword"] + result.parts["length"] == pytest.approx(reward)
    assert result.latency_s > 0


@pytest.mark.parametrize("ground_truth", [None, "", "  "])
def test_missing_ground_truth_is_an_error_not_a_zero(worker, ground_truth):
    result = score(worker, "9", ground_truth)
    assert result.status == "error" and result.correct is None and math.isnan(result.reward)
    assert result.info.startswith("ValueError: prompt p0 has no ground truth")
    assert worker.metrics()["status/error"] == 1 and worker.metrics()["retries"] == 0


def test_plain_def_runs_in_threads_under_the_concurrency_limit(worker):
    threads = set()
    original = worker.score

    def recording(sample):
        threads.add(threading.current_thread())
        return original(sample)

    worker.score = recording  # the base class calls the bound method: a spy needs no subclass

    async def many():
        return await asyncio.gather(*(worker.evaluate(make_sample("9", index=i)) for i in range(20)))

    results = asyncio.run(many())
    assert all(r.status == "ok" and r.correct for r in results)
    assert threading.main_thread() not in threads
    metrics = worker.metrics()
    assert metrics["status/ok"] == 20 and 1 <= metrics["in_flight_peak"] <= 4 and metrics["in_flight"] == 0
    assert {"latency/p50", "latency/p95", "latency/max", "in_flight", "in_flight_peak", "retries"} | {
        f"status/{s}" for s in STATUSES} <= set(metrics)  # the base class's metrics, whatever the subclass


def test_config_loads_and_builds_the_worker_as_the_pipeline_does():
    cfg = load_config(CONFIG, [])
    reward = cfg.domains["arithmetic"].reward
    assert reward.worker == WORKER_PATH
    assert resolve_reward_class("arithmetic", reward) is KeywordLengthRewardWorker
    worker = build_reward_worker("arithmetic", reward)  # constructor args from the YAML
    try:
        assert (worker.max_chars, worker.length_penalty) == (200, 0.5)
        assert worker.limits.timeout_s == reward.timeout_s and worker.limits.max_retries == 0
    finally:
        worker.close()
    for path in (*cfg.data.train_files, *cfg.data.val_files):
        assert (REPO / path).exists(), path


def test_reward_actor_in_a_ray_worker_imports_the_example(ray_local):
    """Ray puts the driver's working directory on its workers' sys.path: started from the repo root (as pytest
    and `python -m rlvr.start` are), the example's import path works in the reward actors too."""
    reward = load_config(CONFIG, []).domains["arithmetic"].reward
    actor = ray_local.remote(RewardActor).options(num_cpus=0).remote("arithmetic", reward)
    try:
        result = ray_local.get(actor.score.remote(make_sample(r"\boxed{9}")), timeout=120)
        assert (result.status, result.reward, result.correct) == ("ok", 1.0, True)
    finally:
        ray_local.kill(actor)
