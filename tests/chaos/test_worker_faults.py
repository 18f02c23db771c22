"""SIGKILL of a worker in the middle of a step (tiny model, local Ray): the step completes, nothing is lost or
trained twice, and the fault is counted under faults/... (docs/faults.md)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter

import pytest
import ray

from rlvr.config import config_from_dict
from rlvr.pipeline.chaos import Injector
from rlvr.pipeline.faults import RunStopped
from tests.chaos.harness import RecordingPipeline, run_with_faults
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow

STEPS, PROMPTS, GROUP = 2, 4, 2  # faults at step 1: after a first step that warmed everything up


def small(model_dir: str, out: str, save_every: int = 0, steps: int = STEPS) -> dict:
    tree = tiny_config(model_dir, out, run={"max_steps": steps, "eval_every": 0, "save_every": save_every},
                       rollout={"prompts_per_step": PROMPTS, "group_size": GROUP},
                       generation={"max_new_tokens": 24, "temperature": 1.0})
    tree["faults"] = {"poll_s": 0.2, "wait_timeout_s": 300}
    return tree


def assert_nothing_lost(run) -> None:
    train = run.train_records()
    assert [r["step"] for r in train] == list(range(STEPS))  # each step once, none skipped
    for r in train:
        assert r["batch/samples"] == PROMPTS * GROUP and r["batch/masked_samples"] == 0
    uids = Counter(u for step in run.pipeline.trained.values() for u in step)
    assert sum(uids.values()) == STEPS * PROMPTS and max(uids.values()) == 1  # no prompt trained twice
    assert not run.errors


def test_actor_infer_killed_mid_step_is_restarted_with_current_weights(tiny_model_dir, ray_local, tmp_path):
    run = run_with_faults(small(tiny_model_dir, str(tmp_path)), [("actor_infer", None, 1)])
    try:
        (inj,) = run.injections
        assert inj.busy and inj.recover_s is not None and inj.new_pid != inj.pid
        assert_nothing_lost(run)
        assert run.total("faults/actor_infer/restarts") == 1
        assert sum(run.total(f"faults/{d}/generate_resent") for d in ("arithmetic", "word_problems")) >= 1
        # Every sample came from the weights of its own step: the restarted worker got them before serving
        # (its initial weights are version 0, which at step >= 1 would show as staleness 1).
        assert all(r["batch/staleness/max"] == 0 for r in run.train_records())
        assert [e["component"] for e in run.events] == ["actor_infer"]
    finally:
        run.pipeline.close()


def test_reward_actor_killed_mid_step_is_restarted_and_its_requests_resent(tiny_model_dir, ray_local, tmp_path):
    slow = {"worker": "tests.helpers.rewards.LatencyRewardForTest", "timeout_s": 20, "args": {"max_latency_s": 1.0}}
    tree = small(tiny_model_dir, str(tmp_path))
    tree["domains"]["arithmetic"]["reward"] = slow
    run = run_with_faults(tree, [("reward", "arithmetic", 1)])
    try:
        (inj,) = run.injections
        assert inj.busy and inj.recover_s is not None and inj.new_pid != inj.pid
        assert_nothing_lost(run)
        assert run.total("faults/arithmetic/score_resent") >= 1
        assert run.total("faults/arithmetic/reward_restarts") == 1
        assert run.total("faults/arithmetic/score_failed") == 0
        assert all(r["arithmetic/reward/status/ok"] == r["arithmetic/scheduler/quota"] * GROUP
                   for r in run.train_records())  # every sample scored, none masked
    finally:
        run.pipeline.close()


def test_scheduler_killed_mid_step_resumes_its_cursor(tiny_model_dir, ray_local, tmp_path):
    run = run_with_faults(small(tiny_model_dir, str(tmp_path)), [("scheduler", "arithmetic", 1)])
    try:
        (inj,) = run.injections
        assert inj.busy and inj.recover_s is not None and inj.new_pid != inj.pid
        assert_nothing_lost(run)
        (event,) = run.events
        assert event["component"] == "arithmetic" and event["event"] == "scheduler_restarts"
        assert run.total("faults/arithmetic/scheduler_restarts") == 1
        # The data position is where the uninterrupted run would be: every prompt taken once.
        states = run.pipeline.schedulers.state_dicts()
        quota = PROMPTS // 2
        assert {d: s["pos"] for d, s in states.items()} == {"arithmetic": STEPS * quota,
                                                           "word_problems": STEPS * quota}
    finally:
        run.pipeline.close()


def test_a_hung_worker_stops_the_run_at_the_deadline_naming_it(tiny_model_dir, ray_local, tmp_path):
    """SIGSTOP (a hang, not a death): no restart comes; the driver's wait runs out and says what it waited for
    and who stopped answering, and where to resume from."""
    tree = small(tiny_model_dir, str(tmp_path), save_every=1)
    tree["faults"] = {"poll_s": 0.2, "wait_timeout_s": 20}  # start-up is bounded apart (restart_timeout_s)
    pipeline = RecordingPipeline(config_from_dict(tree))
    stopped = []

    def hang_at_step_1():  # once step 0 is trained and saved
        while not (pipeline.run_dir / "checkpoints" / "step_000001").exists():
            time.sleep(0.05)
        pid = ray.get(pipeline.clusters.actor_infer.workers[0].health.remote())["pid"]
        os.kill(pid, signal.SIGSTOP)
        stopped.append(pid)

    thread = threading.Thread(target=hang_at_step_1, daemon=True)
    thread.start()
    try:
        with pytest.raises(RunStopped) as err:
            pipeline.run()
        message = str(err.value)
        assert "no result within 20s (faults.wait_timeout_s)" in message
        assert "actor_infer worker 0 (no answer to a health check" in message
        assert f"the last good checkpoint is {pipeline.run_dir}/checkpoints/step_000001" in message
    finally:
        thread.join(5)
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        pipeline.close()


def test_without_restarts_a_dead_worker_stops_the_run_with_a_clear_error(tiny_model_dir, ray_local, tmp_path):
    tree = small(tiny_model_dir, str(tmp_path), save_every=1, steps=3)
    tree["faults"] = {"poll_s": 0.2, "wait_timeout_s": 120, "max_restarts": 0}
    pipeline = RecordingPipeline(config_from_dict(tree))
    injector = Injector(pipeline, [("actor_infer", None, 1)], busy_timeout_s=60, recover_timeout_s=5)
    injector.start()
    try:
        with pytest.raises(RunStopped) as err:
            pipeline.run()
        message = str(err.value)
        assert "after a worker fault" in message and "ActorInferWorker" in message
        assert f"the last good checkpoint is {pipeline.run_dir}/checkpoints/step_000001" in message
    finally:
        injector.stop()
        pipeline.close()
