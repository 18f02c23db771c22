"""The shared sandbox server (`sandbox: http, url: local`, rlvr/pipeline/local_servers.py) outlives a SIGKILL: its
watcher starts it again on the same port, a reward actor's client keeps working, and the driver's supervisor
counts the restart once. Real server process (bubblewrap backend); no Ray: the reward actors that are told the
new address are stand-ins (this test is about the server and the supervisor)."""

from __future__ import annotations

import os
import signal
import time
from types import SimpleNamespace

from rlvr.config.load import config_from_dict
from rlvr.pipeline.faults import FaultLog, Supervisor
from rlvr.pipeline.local_servers import start_local_sandbox
from rlvr.runtime.waiter import Waiter

CODE = "rlvr.workers.rewards.code_sandbox.CodeSandboxRewardWorker"


def test_shared_sandbox_restarts_in_place_and_is_counted_once(tmp_path):
    cfg = config_from_dict({"data": {"train_files": ["unused.jsonl"]}, "faults": {"max_restarts": 2},
                            "domains": {"code": {"reward": {"worker": CODE,
                                                            "args": {"sandbox": "http", "url": "local"}}}}})
    shared, rewards = start_local_sandbox(cfg, {d: dc.reward for d, dc in cfg.domains.items()})
    assert shared is not None
    try:
        url = shared.url
        assert rewards["code"].args["url"] == url and url.startswith("http://127.0.0.1:")
        events = FaultLog(tmp_path / "faults.jsonl")
        supervisor = Supervisor(cfg.faults, Waiter(), events)
        supervisor.sandbox = shared
        told: list[str] = []
        a_reward_actor = SimpleNamespace(set_sandbox_url=SimpleNamespace(remote=told.append))  # its handle's shape
        shared.tell_on_restart([a_reward_actor])
        first = shared.server.pid
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while not (shared.restarts == 1 and shared.server.alive()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert shared.restarts == 1 and shared.server.alive() and shared.server.pid != first
        assert shared.url == url  # the port was free again: nothing to tell the reward actors
        supervisor.tick()
        supervisor.tick()
        assert events.pop_metrics() == {"faults/sandbox/restarts": 1.0}
        assert told == [url]  # the reward actors heard where it answers (here: where it was)
    finally:
        shared.stop()
    assert not shared.server.alive()
