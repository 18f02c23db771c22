"""A real multi-node Ray cluster on this machine (a head and two worker nodes, started by ray.cluster_utils with
custom resources standing for node types), driven the way an operator does it: `ray job submit` of the README's
command with `ray.address=auto`.

- The pipeline (tiny model, HF engine, torch strategy, collective weight sync) runs two steps; `placement.json`
  shows every actor where the config put it: actor_train on the train node, the two actor_infer workers SPREAD
  over two nodes, a PACKed reward cluster on one node, schedulers and the router on the head.
- The shared sandbox server and the embedded judge server, bound to a wildcard address on the driver's node,
  answer reward workers placed on another node at the node's address.

Only this test's own cluster is shut down at the end (never `ray stop`: other people's clusters run here too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, tiny_config
from tests.helpers.own_tmpdir import own_tmpdir

pytestmark = pytest.mark.slow

RAY = str(Path(sys.executable).parent / "ray")


@pytest.fixture(scope="module")
def cluster():
    # The cluster's processes get a temp dir of this test's own: its shutdown kills the reward workers with their
    # process pools, whose pymp-* dirs (multiprocessing's) would otherwise stay in /tmp.
    with own_tmpdir() as (_, tmp_env):
        yield from _cluster({"TOKENIZERS_PARALLELISM": "false", "RAY_ADDRESS": "", **tmp_env})


def _cluster(env: dict[str, str]):
    from ray.cluster_utils import Cluster

    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    os.environ.pop("RAY_ADDRESS")  # the nodes and the jobs find this cluster, never one from the environment
    free = {"dashboard_agent_listen_port": 0}  # Ray's default 52365 is taken by any other cluster on the machine
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"head": 1},
                                                      "include_dashboard": True, "dashboard_port": 0, **free})
    try:
        nodes = {"head": c.head_node,
                 "train": c.add_node(num_cpus=1, resources={"train_node": 1, "infer_node": 2, "cpu_node": 4}, **free),
                 "other": c.add_node(num_cpus=1, resources={"infer_node": 2, "cpu_node": 4}, **free)}
        c.wait_for_nodes()
        yield {"dashboard": "http://" + c.head_node.address_info["webui_url"],
               "ids": {name: node.node_id for name, node in nodes.items()}}
    finally:
        c.shutdown()  # this cluster's processes only
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def submit(dashboard: str, entrypoint: list[str], timeout_s: float) -> str:
    """`ray job submit` as the docs show it; returns its output (the job's log). Fails with it on error."""
    cmd = [RAY, "job", "submit", "--address", dashboard, "--", *entrypoint]
    for _ in range(30):  # the head's job agent comes up some seconds after the dashboard; Ray says to retry
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=REPO)
        if "No available agent to submit job" not in done.stderr + done.stdout:
            break
        time.sleep(2)
    assert done.returncode == 0, (f"ray job submit failed ({done.returncode}):\n{done.stdout[-6000:]}\n"
                                  f"{done.stderr[-3000:]}")
    return done.stdout


def write_yaml(tree: dict, path: Path) -> str:
    path.write_text(yaml.safe_dump(tree))
    return str(path)


def test_pipeline_job_lands_where_placement_says(cluster, tiny_model_dir, tmp_path):
    tree = tiny_config(tiny_model_dir, str(tmp_path / "runs"), run={"max_steps": 2, "eval_every": 0},
                       generation={"world_size": 2, "max_new_tokens": 8},
                       placement={"actor_train": {"resources": {"train_node": 1}},
                                  "actor_infer": {"strategy": "SPREAD", "resources": {"infer_node": 1}},
                                  "reward": {"resources": {"cpu_node": 1}},
                                  "scheduler": {"resources": {"head": 0.1}}})
    tree["domains"]["arithmetic"]["reward"].update(
        world_size=2, placement={"strategy": "PACK", "resources": {"cpu_node": 1}})
    config = write_yaml(tree, tmp_path / "multinode.yaml")
    log = submit(cluster["dashboard"], [sys.executable, "-m", "rlvr.start", "--config", config, "ray.address=auto"],
                 timeout_s=900)
    run_dir = Path(next(line for line in log.splitlines() if line.startswith("run directory:")).split(": ", 1)[1])

    placed = json.loads((run_dir / "placement.json").read_text())["clusters"]
    ids = cluster["ids"]
    assert placed["actor_train"] == [ids["train"]]
    assert sorted(placed["actor_infer"]) == sorted([ids["train"], ids["other"]])  # SPREAD: one per node
    first, second = placed["reward/arithmetic"]
    assert first == second and first in (ids["train"], ids["other"])  # PACK: one node
    assert placed["reward/word_problems"][0] in (ids["train"], ids["other"])
    for name in ("scheduler/arithmetic", "scheduler/word_problems", "router"):
        assert placed[name] == [ids["head"]], name

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "actor/loss" in r]
    assert [r["step"] for r in steps] == [0, 1]
    for r in steps:  # the collective group reached both inference workers on both nodes, checked by parity
        assert r["weight_sync/gb"] > 0 and r["actor/weight_sync_logprob_max_diff"] < 1e-4
        assert r["batch/samples"] == 8


def test_servers_answer_reward_workers_on_other_nodes(cluster, tiny_model_dir, tmp_path):
    reward = {"timeout_s": 60, "max_retries": 0}
    tree = {"data": {"train_files": [str(REPO / "data/mix/code_train.jsonl")]},
            "model": {"path": tiny_model_dir},
            "domains": {
                "code": {"reward": {**reward, "worker": "rlvr.workers.rewards.code_sandbox.CodeSandboxRewardWorker",
                                    "args": {"sandbox": "http", "url": "local"}}},
                "judge": {"reward": {**reward, "worker": "rlvr.workers.rewards.llm_judge.LLMJudgeRewardWorker",
                                     "args": {"base_url": "local", "parse_mode": "yes_no_logprobs"}}}},
            "rollout": {"domain_interleave_probs": {"code": 0.5, "judge": 0.5}},
            "judge_server": {"model": tiny_model_dir, "prefer_vllm": False, "threads": 1, "host": "0.0.0.0"},
            "sandbox_server": {"host": "0.0.0.0"},
            "placement": {"reward": {"resources": {"cpu_node": 1}}}}
    config = write_yaml(tree, tmp_path / "servers.yaml")
    out = tmp_path / "result.json"
    submit(cluster["dashboard"], [sys.executable, "-m", "tests.helpers.remote_rewards", "--config", config,
                                  "--out", str(out)], timeout_s=600)
    report = json.loads(out.read_text())
    for url in report["urls"].values():  # the node's address, neither loopback nor the wildcard
        assert "127.0.0.1" not in url and "0.0.0.0" not in url, report["urls"]
    assert report["driver_node"] == cluster["ids"]["head"]
    assert set(report["reward_nodes"].values()) <= {cluster["ids"]["train"], cluster["ids"]["other"]}
    code, judge = report["results"]["code"], report["results"]["judge"]
    assert code["status"] == "ok" and code["reward"] == 1.0, code  # the program ran in the sandbox and passed
    # The judge answered: a verdict, or (random tiny judge model) a reply with neither YES nor NO in it; an
    # unreachable server would be an error.
    assert judge["status"] == "ok" or judge["info"].startswith("unparseable judge reply"), judge
