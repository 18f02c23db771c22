"""Entry point of a Ray job (tests/integration/test_multinode.py): on the driver's node, the shared sandbox server
and the embedded judge server, as the pipeline starts them (bound to `sandbox_server.host` / `judge_server.host`);
on another node, the code and judge reward clusters placed by config, each scoring one sample through its server.
Writes {"urls", "driver_node", "reward_nodes", "results"} as JSON to --out.

    python -m tests.helpers.remote_rewards --config cfg.yaml --out result.json
"""

from __future__ import annotations

import argparse
import json

import ray

from rlvr.config.load import load_config
from rlvr.data.types import Prompt, Sample
from rlvr.pipeline.build import start_local_judge
from rlvr.pipeline.local_servers import start_local_sandbox
from rlvr.workers.cluster import Cluster
from rlvr.workers.placement import Planner, node_of
from rlvr.workers.rewards.reward_actor import RewardActor

PROGRAM = "Here it is:\n```python\ndef add(a, b):\n    return a + b\n```"
TESTS = {"format": "call", "fn": "add", "cases": [{"args": [8, 5], "output": 13}, {"args": [-6, 18], "output": 12}]}


def sample(domain: str, text: str, truth) -> Sample:
    prompt = Prompt(uid=f"{domain}-0", domain=domain, ground_truth=truth,
                    messages=[{"role": "user", "content": "Write add(a, b). / What is the capital of France?"}])
    return Sample(prompt=prompt, group_id="g", index=0, response_ids=[], response_text=text, finish_reason="stop",
                  policy_version=0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    cfg = load_config(args.config)
    ray.init(address="auto")
    judge, rewards = start_local_judge(cfg)
    sandbox, rewards = start_local_sandbox(cfg, rewards)
    planner = Planner(cfg)
    clusters = {d: Cluster.start(f"reward/{d}", RewardActor, 1, d, rewards[d], max_concurrency=10,
                                 placement=planner.reward(d)) for d in ("code", "judge")}
    try:
        inputs = {"code": sample("code", PROGRAM, json.dumps(TESTS)), "judge": sample("judge", "Paris.", "Paris")}
        results = {d: ray.get(c.workers[0].score.remote(inputs[d])) for d, c in clusters.items()}
        report = {"urls": {"sandbox": rewards["code"].args["url"], "judge": rewards["judge"].args["base_url"]},
                  "driver_node": ray.get_runtime_context().get_node_id(),
                  "reward_nodes": {d: ray.get(node_of(c.workers[0])) for d, c in clusters.items()},
                  "results": {d: {"status": r.status, "reward": r.reward, "info": r.info} for d, r in results.items()}}
    finally:
        for c in clusters.values():
            ray.get(c.call("close"))
            c.kill()
        planner.release()
        sandbox.stop()
        judge.stop()
    with open(args.out, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
