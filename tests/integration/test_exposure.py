"""Secrets and exposure, on a whole run through the CLI (tiny model; math, code and judge domains, the local judge
server and a sandbox server; every tracker on, W&B offline):

- a judge API key given through its environment variable appears in no file the run writes: the run directory
  (metrics, val samples, checkpoints, TensorBoard, W&B offline files), the run's stdout/stderr, the judge server's
  logs and the Ray session's logs;
- the servers rlvr starts (judge, sandbox) listen on loopback only: the listening sockets of the run's own
  process tree are inspected while it runs."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.slow

MATH = "rlvr.workers.rewards.math_rule.MathRuleRewardWorker"


def run_config(model_dir: str, out: Path) -> dict:
    return {
        "run": {"name": "exposure", "max_steps": 2, "eval_every": 1, "save_every": 2, "output_dir": str(out),
                "progress_bar": False},
        "trackers": {"jsonl": True, "tensorboard": True, "wandb": True, "wandb_mode": "offline"},
        "model": {"path": model_dir},
        "data": {"train_files": [str(REPO / f) for f in ("data/math/train.jsonl", "data/mix/code_train.jsonl",
                                                          "data/mix/judge_train.jsonl")],
                 "val_files": [str(REPO / f) for f in ("data/math/val.jsonl", "data/mix/code_val.jsonl",
                                                        "data/mix/judge_val.jsonl")],
                 "domain_key": "route", "tag_key": "domain",
                 "tag_to_domain": {"arithmetic": "math", "word_problems": "math", "code": "code", "judge": "judge"}},
        "domains": {
            "math": {"reward": {"worker": MATH, "args": {"answer_fallback": "last_number", "pool_size": 1}}},
            "code": {"reward": {"worker": "rlvr.workers.rewards.code_sandbox.CodeSandboxRewardWorker",
                                "args": {"sandbox": "http", "max_parallel": 1}}},
            "judge": {"reward": {"worker": "rlvr.workers.rewards.llm_judge.LLMJudgeRewardWorker",
                                 "args": {"base_url": "local", "max_tokens": 4}}},
        },
        "judge_server": {"model": model_dir, "prefer_vllm": False, "threads": 1},
        "rollout": {"prompts_per_step": 4, "group_size": 2,
                    "domain_interleave_probs": {"math": 0.5, "code": 0.25, "judge": 0.25}},
        "generation": {"max_new_tokens": 16},
        "validation": {"max_prompts_per_domain": 2},
        "actor_train": {"micro_batch_size": 8, "bf16_autocast": False},
    }


def tree_of(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return []


def files_under(*roots: Path) -> list[Path]:
    return [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file()]


def test_judge_key_never_written_and_servers_listen_on_loopback(tiny_model_dir, tmp_path):
    canary = f"sk-rlvr-canary-{uuid.uuid4().hex}"
    cfg = tmp_path / "exposure.yaml"
    cfg.write_text(yaml.safe_dump(run_config(tiny_model_dir, tmp_path / "runs")))
    out, err = open(tmp_path / "stdout.log", "wb"), open(tmp_path / "stderr.log", "wb")
    env = {**os.environ, "RLVR_JUDGE_API_KEY": canary}
    proc = subprocess.Popen([sys.executable, "-m", "rlvr.start", "--config", str(cfg)], cwd=REPO, env=env,
                            stdout=out, stderr=err)
    driver = psutil.Process(proc.pid)
    listening: dict[tuple[int, str], set[tuple[str, int]]] = {}  # (pid, role) -> addresses
    extra_logs: set[Path] = set()  # the judge server's log files (a temporary directory, gone after the run)
    session_dirs: set[Path] = set()
    key_holders = 0
    try:
        while proc.poll() is None:
            for p in tree_of(driver):
                try:
                    cmd = " ".join(p.cmdline())
                    role = ("judge" if "rlvr.judge_server" in cmd else "sandbox" if "sandbox.server" in cmd
                            else p.name())
                    for c in p.net_connections(kind="inet"):
                        if c.status == psutil.CONN_LISTEN:
                            listening.setdefault((p.pid, role), set()).add((c.laddr.ip, c.laddr.port))
                    if role == "judge":
                        extra_logs.update(Path(f.path) for f in p.open_files() if f.path.endswith(".log"))
                    if "--raylet_socket_name=" in cmd:
                        sock = cmd.split("--raylet_socket_name=")[1].split()[0]
                        session_dirs.add(Path(sock).parents[1])
                    if role.startswith("ray::RewardActor") and canary in p.environ().get("RLVR_JUDGE_API_KEY", ""):
                        key_holders += 1
                    for log in extra_logs:  # read while they exist
                        if log.exists():
                            assert canary.encode() not in log.read_bytes(), f"the judge key is in {log}"
                except psutil.Error:
                    continue
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        out.close()
        err.close()
    assert proc.returncode == 0, (tmp_path / "stderr.log").read_text()[-3000:]
    assert key_holders > 0  # the reward workers did run with the key: the test is not vacuous

    roles = {role for _, role in listening}
    assert {"judge", "sandbox"} <= roles, listening
    for (pid, role), addresses in listening.items():
        if role in ("judge", "sandbox"):
            for ip, port in addresses:
                assert ipaddress.ip_address(ip).is_loopback, f"{role} server (pid {pid}) listens on {ip}:{port}"

    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    written = files_under(run_dir, *(d / "logs" for d in session_dirs)) + [tmp_path / "stdout.log",
                                                                            tmp_path / "stderr.log"]
    assert any(p.suffix == ".wandb" for p in written) and any("tfevents" in p.name for p in written)
    assert (run_dir / "checkpoints").exists() and (run_dir / "val_samples.jsonl").exists()
    leaks = [p for p in written if canary.encode() in p.read_bytes()]
    assert not leaks, f"the judge API key was written to {leaks}"
    ray_sockets = sorted({f"{ip}:{port} ({role})" for (_, role), a in listening.items() if role not in ("judge",
                                                                                                          "sandbox")
                          for ip, port in a})
    print(f"\nchecked {len(written)} files; rlvr's servers on loopback; Ray's own sockets: {ray_sockets}")
