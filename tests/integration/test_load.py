"""Load: 2,000 judge requests in flight against a flaky stand-in, 500 queued sandbox runs, a 5,000-prompt
validation. Every request's outcome is accounted for, and memory stays bounded (the peaks are printed for the
report: `pytest -s`)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections import Counter

import pytest

from rlvr.data.types import Prompt, Sample
from rlvr.workers.rewards.base import RewardLimits
from rlvr.workers.rewards.code_sandbox import CodeSandboxRewardWorker
from rlvr.workers.rewards.llm_judge import LLMJudgeRewardWorker
from tests.conftest import REPO
from tests.helpers.memory import PeakRSS

pytestmark = pytest.mark.slow


def sample(i: int, text: str, ground_truth, domain: str = "qa") -> Sample:
    prompt = Prompt(uid=f"p{i}", domain=domain, ground_truth=ground_truth,
                    messages=[{"role": "user", "content": f"sample-{i}: what is {i} + 1?"}])
    return Sample(prompt=prompt, group_id=f"g{i}", index=0, response_ids=[], response_text=text,
                  finish_reason="stop", policy_version=0)


@pytest.fixture
def judge_standin():
    proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.judge_standin", "--error-rate", "0.05",
                             "--max-latency-s", "0.5", "--seed", "0"], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_2000_judge_requests_in_flight_against_a_flaky_judge(judge_standin):
    n = 2000
    limits = RewardLimits(max_concurrency=n, timeout_s=60, max_retries=2, retry_backoff_s=0.1)
    worker = LLMJudgeRewardWorker("qa", limits, base_url=judge_standin + "/v1", cache_size=0)
    samples = [sample(i, f"{i + 1}", str(i + 1)) for i in range(n)]

    async def go():
        results = await asyncio.gather(*(worker.evaluate(s) for s in samples))
        await worker.aclose()
        return results

    with PeakRSS([os.getpid()]) as mem:
        results = asyncio.run(go())
    with urllib.request.urlopen(judge_standin + "/stats") as r:
        stats = json.loads(r.read())
    outcomes = stats["outcomes"]
    metrics = worker.metrics()
    print(f"\n2000 judge requests: peak RSS growth {mem.growth_mb:.0f} MB (baseline {mem.baseline_mb:.0f} MB); "
          f"statuses {dict(Counter(r.status for r in results))}; retries {metrics['retries']:.0f}; in flight at "
          f"the worker {metrics['in_flight_peak']:.0f}, at the server {stats['peak_in_flight']}")
    assert metrics["in_flight_peak"] == n  # all of them admitted at once
    # Every request accounted for: one result each, and it says what the server did with its last attempt.
    assert len(results) == n and set(outcomes) == {f"sample-{i}" for i in range(n)}
    for i, result in enumerate(results):
        attempts = outcomes[f"sample-{i}"]
        if result.status == "ok":
            assert attempts[-1] == "ok" and attempts.count("ok") == 1 and result.reward == 1.0
        else:
            assert result.status == "error" and attempts == ["error"] * 3
    assert sum(len(a) for a in outcomes.values()) == n + metrics["retries"]
    assert mem.growth_mb < 400  # a few hundred KB per request in flight would show here


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_500_queued_sandbox_runs_all_finish():
    n = 500
    worker = CodeSandboxRewardWorker("code", RewardLimits(max_concurrency=16, timeout_s=60), sandbox="http",
                                     max_parallel=2)
    tests = {"format": "assert", "tests": ["assert add(1, 2) == 3"]}
    program = "```python\ndef add(a, b):\n    return a + b\n```"
    samples = [sample(i, program, tests, domain="code") for i in range(n)]
    server_pid = worker.health()["sandbox_pid"]

    async def go():
        return await asyncio.gather(*(worker.evaluate(s) for s in samples))

    try:
        with PeakRSS([os.getpid(), server_pid]) as mem:
            results = asyncio.run(go())
        metrics = worker.metrics()
    finally:
        worker.close()
    print(f"\n500 sandbox runs: peak RSS growth {mem.growth_mb:.0f} MB (baseline {mem.baseline_mb:.0f} MB, client "
          f"and server); in flight at most {metrics['in_flight_peak']:.0f}; p95 latency "
          f"{metrics['latency/p95']:.2f}s")
    assert [r.status for r in results] == ["ok"] * n and all(r.reward == 1.0 for r in results)
    assert metrics["in_flight_peak"] == 16 and metrics["calls"] == n
    assert mem.growth_mb < 400


def test_5000_prompt_validation_accounts_for_every_prompt(tiny_model_dir, ray_local, tmp_path):
    """Real actors (a scheduler, an HF actor_infer worker with the tiny model, a math reward actor)."""
    import ray
    from transformers import AutoTokenizer

    from rlvr.config.load import config_from_dict
    from rlvr.schedulers.dynamic_sampling import DynamicSamplingScheduler
    from rlvr.workers.actor_infer import ActorInferWorker
    from rlvr.workers.cluster import Cluster
    from rlvr.workers.rewards.reward_actor import RewardActor
    from tests.conftest import tiny_config

    n = 5000
    # One token per answer, big engine batches: the subject is the accounting of 5,000 prompts, not generation.
    tree = tiny_config(tiny_model_dir, str(tmp_path), validation={"max_prompts_per_domain": None, "max_new_tokens": 1},
                       generation={"max_batch_size": 256, "max_in_flight_per_worker": 256})
    # A fast reward, likewise (math-verify would take minutes over 5,000 answers on two cores).
    tree["domains"] = {"arithmetic": {"reward": {"worker": "tests.helpers.rewards.LatencyRewardForTest",
                                                 "max_concurrency": 64, "args": {"max_latency_s": 0.0}}}}
    tree["rollout"].pop("domain_interleave_probs")
    cfg = config_from_dict(tree)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompts = []
    for i in range(n):
        messages = [{"role": "user", "content": f"What is {i} + 1?"}]
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        prompts.append(Prompt(uid=f"val:{i}", domain="arithmetic", ground_truth=str(i + 1), messages=messages,
                              prompt_ids=ids))
    infer = Cluster.start("actor_infer", ActorInferWorker, 1, cfg, tiny_model_dir, max_concurrency=1000)
    reward = Cluster.start("reward/arithmetic", RewardActor, 1, "arithmetic", cfg.domains["arithmetic"].reward,
                           max_concurrency=1000)
    scheduler = ray.remote(DynamicSamplingScheduler).options(num_cpus=0, max_concurrency=1000).remote(
        "arithmetic", [], ray.put(prompts), infer.workers, reward.workers, cfg)
    try:
        pids = [ray.get(a.health.remote())["pid"] for a in (*infer.workers, *reward.workers, scheduler)]
        with PeakRSS([os.getpid(), *pids], children=False) as mem:
            metrics, counts, examples = ray.get(scheduler.validate.remote(0))
        admission = infer.first("admission_stats")
    finally:
        for actor in (scheduler, *infer.workers, *reward.workers):
            ray.kill(actor, no_restart=True)
    statuses = {s: metrics[f"val/arithmetic/reward/status/{s}"] for s in ("ok", "error", "timeout", "invalid")}
    print(f"\n5000-prompt validation: peak RSS growth {mem.growth_mb:.0f} MB (baseline {mem.baseline_mb:.0f} MB, "
          f"driver + 3 actors); statuses {statuses}; in flight at the engine at most {admission['in_flight_peak']}")
    assert counts["total"] == n and sum(statuses.values()) == n
    assert "val/arithmetic/generation_errors" not in metrics
    assert sorted(e["prompt"] for e in examples) == sorted(p.uid for p in prompts)  # each prompt once
    assert admission["in_flight_peak"] <= cfg.generation.max_in_flight_per_worker
    assert mem.growth_mb < 1000
