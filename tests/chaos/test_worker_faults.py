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

from rlvr.config.load import config_from_dict
from rlvr.pipeline.faults import RunStopped
from tests.chaos.harness import run_with_faults
from tests.chaos.injector import Injector, RecordingPipeline
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow

PROMPTS, GROUP = 4, 2
DOMAINS = ("arithmetic", "word_problems")


def small(model_dir: str, out: str, steps: int, save_every: int = 0, one_domain: bool = False) -> dict:
    tree = tiny_config(model_dir, out, run={"max_steps": steps, "eval_every": 0, "save_every": save_every},
                       rollout={"prompts_per_step": PROMPTS, "group_size": GROUP},
                       generation={"max_new_tokens": 24, "temperature": 1.0})
    tree["faults"] = {"poll_s": 0.2, "wait_timeout_s": 300}
    if one_domain:  # fewer actors to start, for the tests where the run is meant to stop
        tree["domains"].pop("word_problems")
        tree["rollout"].pop("domain_interleave_probs")
    return tree


def test_worker_faults_mid_step_are_survived(tiny_model_dir, ray_local, tmp_path):
    """One run, three faults (one per step, after a warm-up step): the actor_infer worker, the arithmetic reward
    actor (a slow reward, so that requests are in flight), the arithmetic scheduler. Every step completes with its
    full batch, no prompt is trained twice, and each fault is counted."""
    slow = {"worker": "tests.helpers.rewards.LatencyRewardForTest", "timeout_s": 20, "args": {"max_latency_s": 1.0}}
    tree = small(tiny_model_dir, str(tmp_path), steps=4)
    tree["domains"]["arithmetic"]["reward"] = slow
    plan = [("actor_infer", None, 1), ("reward", "arithmetic", 2), ("scheduler", "arithmetic", 3)]
    run = run_with_faults(tree, plan)
    try:
        assert not run.errors
        for inj in run.injections:  # each killed with requests in flight, and back under a new pid
            assert inj.busy and inj.recover_s is not None and inj.new_pid != inj.pid, inj
            assert inj.orphans == [], inj  # nothing the killed process started outlived it
        train = run.train_records()
        assert [r["step"] for r in train] == [0, 1, 2, 3]  # each step once, none skipped
        for r in train:  # ... with its whole batch, every sample scored
            assert r["batch/samples"] == PROMPTS * GROUP and r["batch/masked_samples"] == 0
        uids = Counter(u for step in run.pipeline.trained.values() for u in step)
        assert sum(uids.values()) == 4 * PROMPTS and max(uids.values()) == 1  # no prompt trained twice
        by_step = {r["step"]: r for r in train}

        # actor_infer (step 1): restarted, its requests re-sent, and every sample came from the weights of its own
        # step (the restarted worker's initial weights are version 0: at step >= 1 that would be staleness 1).
        assert by_step[1].get("faults/actor_infer/restarts") == 1
        assert sum(by_step[1].get(f"faults/{d}/generate_resent", 0) for d in DOMAINS) >= 1
        assert all(r["batch/staleness/max"] == 0 for r in train)
        # reward actor (step 2): restarted, its requests re-sent and scored, none lost
        assert run.total("faults/reward/arithmetic/restarts") == 1
        assert by_step[2].get("faults/arithmetic/score_resent", 0) >= 1
        assert run.total("faults/arithmetic/score_failed") == 0
        # scheduler (step 3): restored where it was; its data position is the uninterrupted run's
        assert by_step[3].get("faults/arithmetic/scheduler_restarts") == 1
        states = run.pipeline.schedulers.state_dicts()
        assert {d: s["pos"] for d, s in states.items()} == {d: 4 * PROMPTS // 2 for d in DOMAINS}
        assert sorted(e["component"] for e in run.events) == ["actor_infer", "arithmetic", "reward/arithmetic"]
    finally:
        run.pipeline.close()


def test_a_hung_worker_stops_the_run_at_the_deadline_naming_it(tiny_model_dir, ray_local, tmp_path):
    """SIGSTOP (a hang, not a death): no restart comes; the driver's wait runs out and says what it waited for
    and who stopped answering, and where to resume from."""
    tree = small(tiny_model_dir, str(tmp_path), steps=2, save_every=1, one_domain=True)
    tree["faults"] = {"poll_s": 0.2, "wait_timeout_s": 10}  # start-up is bounded apart (restart_timeout_s)
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
        assert "no result within 10s (faults.wait_timeout_s)" in message
        assert "actor_infer/0 (no answer to a health check" in message
        assert f"the last good checkpoint is {pipeline.run_dir}/checkpoints/step_000001" in message
    finally:
        thread.join(5)
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        pipeline.close()


def test_without_restarts_a_dead_worker_stops_the_run_with_a_clear_error(tiny_model_dir, ray_local, tmp_path):
    tree = small(tiny_model_dir, str(tmp_path), steps=2, save_every=1, one_domain=True)
    tree["faults"] = {"poll_s": 0.2, "wait_timeout_s": 120, "max_restarts": 0}
    pipeline = RecordingPipeline(config_from_dict(tree))
    injector = Injector(pipeline, [("actor_infer", None, 1)], busy_timeout_s=60, recover_timeout_s=5)
    injector.start()
    try:
        with pytest.raises(RunStopped) as err:
            pipeline.run()
        message = str(err.value)
        assert "after a worker fault: WorkerFault: actor_infer/0 died and did not come back (faults.max_restarts=0" \
            in message
        assert f"the last good checkpoint is {pipeline.run_dir}/checkpoints/step_000001" in message
    finally:
        injector.stop()
        pipeline.close()
