"""SIGKILL of a server in the middle of a step: the sandbox server (restarted by the code reward that started
it) and the local judge server (restarted by the driver). Requests that failed meanwhile are retried against the
new server: every sample ends scored, none silently lost (docs/faults.md)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time

import psutil
import pytest

from rlvr.data.types import Prompt, Sample
from rlvr.workers.rewards.base import RewardLimits
from rlvr.workers.rewards.code_sandbox import CodeSandboxRewardWorker
from tests.chaos.harness import run_with_faults
from tests.chaos.injector import outliving
from tests.conftest import REPO, tiny_config

# A correct program that takes a moment, so that several runs are inside the server when it is killed.
SLOW_ADD = "```python\nimport time\ntime.sleep(0.5)\ndef add(a, b):\n    return a + b\n```"
TESTS = {"format": "assert", "tests": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]}


def sample(i: int) -> Sample:
    prompt = Prompt(uid=f"p{i}", domain="code", ground_truth=TESTS, text="q")
    return Sample(prompt=prompt, group_id=f"g{i}", index=0, response_ids=[], response_text=SLOW_ADD,
                  finish_reason="stop", policy_version=0)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_sandbox_server_killed_mid_flight_is_restarted_and_runs_retried():
    limits = RewardLimits(max_concurrency=8, timeout_s=60, max_retries=2, retry_backoff_s=0.2)
    worker = CodeSandboxRewardWorker("code", limits, sandbox="http", max_parallel=2)
    killed = worker.health()["sandbox_pid"]

    async def scenario():
        tasks = [asyncio.create_task(worker.evaluate(sample(i))) for i in range(8)]
        while worker.metrics()["in_flight"] < 8:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # the first programs are running inside the server
        children.extend(c.pid for c in psutil.Process(killed).children(recursive=True))
        assert children  # sandboxes were running: the orphan check below is not vacuous
        os.kill(killed, signal.SIGKILL)
        return await asyncio.gather(*tasks)

    children: list[int] = []
    try:
        results = asyncio.run(scenario())
        assert [r.status for r in results] == ["ok"] * 8 and all(r.reward == 1.0 for r in results)
        health, metrics = worker.health(), worker.metrics()
        assert health["sandbox_pid"] != killed and health["sandbox_alive"]
        assert metrics["faults/sandbox_restarts"] == 1 and metrics["retries"] >= 1
        assert outliving(children, grace_s=10) == []  # its sandboxes died with it (bwrap --die-with-parent)
    finally:
        worker.close()
    assert not worker.health()  # closed: no server left


@pytest.mark.slow
def test_judge_server_killed_mid_step_is_restarted_by_the_driver(tiny_model_dir, ray_local, tmp_path):
    judge = {"worker": "tests.helpers.rewards.AnyVerdictJudgeForTest", "timeout_s": 30,
             "max_retries": 8, "retry_backoff_s": 0.5, "args": {"base_url": "local", "max_tokens": 8}}
    tree = tiny_config(tiny_model_dir, str(tmp_path), run={"max_steps": 2, "eval_every": 0},
                       rollout={"prompts_per_step": 4, "group_size": 2},
                       generation={"max_new_tokens": 24},
                       judge_server={"model": tiny_model_dir, "prefer_vllm": False, "threads": 1})
    tree["domains"] = {"judge": {"reward": judge}}
    tree["data"] = {"train_files": [str(REPO / "data/mix/judge_train.jsonl")], "domain_key": "domain"}
    tree["rollout"].pop("domain_interleave_probs")
    tree["faults"] = {"poll_s": 0.2, "wait_timeout_s": 300}
    run = run_with_faults(tree, [("judge", "judge", 1)])
    try:
        (inj,) = run.injections
        assert inj.busy and inj.recover_s is not None and inj.new_pid != inj.pid
        assert inj.orphans == []  # nothing the killed judge started outlived it
        assert [r["step"] for r in run.train_records()] == [0, 1]
        assert run.total("faults/judge/restarts") == 1
        for r in run.train_records():  # every sample got its verdict: the requests cut by the kill were retried
            assert r["judge/reward/status/ok"] == 8 and r["batch/masked_samples"] == 0
        (event,) = run.events
        assert event["component"] == "judge" and event["url"] == run.pipeline.judge_server.url
    finally:
        run.pipeline.close()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_idle_sandbox_server_killed_is_restarted_by_its_watcher():
    worker = CodeSandboxRewardWorker("code", RewardLimits(timeout_s=60), sandbox="http", max_parallel=1)
    try:
        killed = worker.health()["sandbox_pid"]
        os.kill(killed, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while worker.health()["sandbox_pid"] == killed or not worker.health()["sandbox_alive"]:
            assert time.monotonic() < deadline, "the sandbox server was not restarted"
            time.sleep(0.05)
        assert asyncio.run(worker.evaluate(sample(0))).status == "ok"  # no request had to notice
        assert worker.metrics()["faults/sandbox_restarts"] == 1
    finally:
        worker.close()
