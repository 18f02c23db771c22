"""Start-up: the local servers start while the workers load (rlvr/pipeline/parts.py, start_servers_and_clusters),
and a failure on either side stops what the other started. The servers and the cluster builder are fakes here
(named so): what is tested is the orchestration; the real ones run in every end-to-end test of the CLI."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from rlvr.config.domains import RewardConfig
from rlvr.judge_server.launcher import JudgeServerError
from rlvr.pipeline import parts

REWARD = RewardConfig(worker="llm_judge", args={"base_url": "local"})


class FakeServer:
    def __init__(self, url: str):
        self.url, self.stopped = url, False

    def stop(self) -> None:
        self.stopped = True


class Scene:
    """Fakes of the judge and sandbox start-ups and of build_clusters, with what happened to them."""

    def __init__(self, monkeypatch, judge_fails=False, sandbox_fails=False, clusters_fail=False):
        self.workers_loading = threading.Event()
        self.judge, self.sandbox, self.log = FakeServer("http://judge/v1"), FakeServer("http://sandbox"), []

        def start_local_judge(cfg, log_dir):
            # the workers were started while the judge still started: they must say so before it answers
            self.log.append(("judge saw the workers loading", self.workers_loading.wait(10)))
            if judge_fails:
                raise JudgeServerError("judge failed to start")
            return self.judge, {"judge": REWARD.model_copy(update={"args": {"base_url": self.judge.url}})}

        def start_local_sandbox(cfg, rewards):
            if sandbox_fails:
                raise RuntimeError("sandbox failed to start")
            return self.sandbox, rewards

        def build_clusters(cfg, model_path, rewards_cfg, waiter):
            self.workers_loading.set()
            if clusters_fail:
                raise RuntimeError("a worker failed to load")
            try:
                rewards = rewards_cfg()
            except Exception:
                self.log.append(("workers released", True))
                raise
            return {"rewards": rewards}

        monkeypatch.setattr(parts, "start_local_judge", start_local_judge)
        monkeypatch.setattr(parts, "start_local_sandbox", start_local_sandbox)
        monkeypatch.setattr(parts, "build_clusters", build_clusters)

    def start(self):
        return parts.start_servers_and_clusters(None, Path("/nonexistent"), "model", waiter=None)


def test_the_servers_start_while_the_workers_load_and_the_rewards_get_their_urls(monkeypatch):
    scene = Scene(monkeypatch)
    judge, sandbox, rewards, clusters = scene.start()
    assert scene.log == [("judge saw the workers loading", True)]
    assert (judge, sandbox) == (scene.judge, scene.sandbox)
    assert clusters["rewards"]["judge"].args["base_url"] == "http://judge/v1" == rewards["judge"].args["base_url"]
    assert not judge.stopped and not sandbox.stopped


def test_a_server_that_fails_to_start_fails_the_start_up_and_the_workers_are_released(monkeypatch):
    scene = Scene(monkeypatch, judge_fails=True)
    with pytest.raises(JudgeServerError, match="judge failed"):
        scene.start()
    assert ("workers released", True) in scene.log


def test_a_sandbox_that_fails_stops_the_judge_started_before_it(monkeypatch):
    scene = Scene(monkeypatch, sandbox_fails=True)
    with pytest.raises(RuntimeError, match="sandbox failed"):
        scene.start()
    assert scene.judge.stopped and ("workers released", True) in scene.log


def test_workers_that_fail_to_load_stop_the_servers_once_started(monkeypatch):
    scene = Scene(monkeypatch, clusters_fail=True)
    with pytest.raises(RuntimeError, match="a worker failed"):
        scene.start()
    assert scene.judge.stopped and scene.sandbox.stopped


def test_a_background_call_runs_in_a_daemon_thread_and_hands_back_its_error():
    names = []

    def boom():
        names.append((threading.current_thread().name, threading.current_thread().daemon))
        raise ValueError("boom")

    future = parts.in_background(boom)
    with pytest.raises(ValueError, match="boom"):
        future.result(10)
    assert names == [("boom", True)]
