"""Env domains inside the whole pipeline on local Ray, with the tiny random model and the HF engine: a slow grid
puzzle, an env that fails in every way on some episodes, and a single-turn math domain in the same steps, trained
with GiGPO under one-step off-policy and the mini-batch pipeline together."""

from __future__ import annotations

import pytest

from tests.conftest import tiny_config
from tests.integration.test_pipeline import read_metrics, run_pipeline

pytestmark = pytest.mark.slow

STEPS, PROMPTS, GROUP = 2, 6, 2  # per step: 2 grid tasks, 2 faulty-env tasks, 2 math prompts, 2 episodes each


def agent_tree(model_dir: str, out: str) -> dict:
    limits = {"max_turns": 3, "max_tokens_per_turn": 6, "max_total_tokens": 400, "step_timeout_s": 5,
              "train_tasks": 32, "val_tasks": 2}
    math = {"worker": "rlvr.workers.rewards.math_rule.MathRuleRewardWorker", "timeout_s": 20,
            "args": {"answer_fallback": "last_number", "pool_size": 1}}
    tree = tiny_config(model_dir, out, run={"max_steps": STEPS, "eval_every": STEPS},
                       rollout={"prompts_per_step": PROMPTS, "group_size": GROUP,
                                "domain_interleave_probs": {"grid": 1 / 3, "faulty": 1 / 3, "math": 1 / 3}},
                       actor_train={"mini_batch_size": 4},
                       overlap={"mini_batch_pipeline": True, "one_step_off_policy": True},
                       algorithm={"preset": "gigpo", "gigpo": {"gamma": 0.9}})
    tree["data"]["tag_to_domain"] = {"arithmetic": "math", "word_problems": "math"}
    tree["data"]["domain_key"] = "route"
    tree["data"]["tag_key"] = "domain"
    tree["domains"] = {
        "grid": {"env": {"path": "tests.helpers.envs.SlowGridEnvForTest", "args": {"delay_s": 0.2}, **limits}},
        "faulty": {"env": {"path": "tests.helpers.envs.FaultyEnvForTest", "args": {"mode": "mixed"}, **limits}},
        "math": {"reward": math},
    }
    return tree


def test_env_domains_train_with_gigpo_off_policy_and_pipelined(tiny_model_dir, ray_local, tmp_path):
    run = run_pipeline(agent_tree(tiny_model_dir, str(tmp_path)))
    try:
        records = read_metrics(run.run_dir)
    finally:
        run.close()
    trained = [r for r in records if "actor/loss" in r]
    assert [r["step"] for r in trained] == list(range(STEPS))
    for r in trained:
        # the same quotas as any domain: 2 groups of 2 per domain, whole groups, one-step-stale after step 0
        assert r["batch/samples"] == PROMPTS * GROUP and r["batch/groups"] == PROMPTS
        assert r["batch/staleness/max"] == (1.0 if r["step"] > 0 else 0.0)
        # the slow grid env: episodes of 1..3 turns, statuses all ok, anchor statistics logged
        assert 1 <= r["grid/episode/turns/mean"] <= 3 and r["grid/reward/status/ok"] == 4
        assert 0 <= r["grid/episode/invalid_action_rate"] <= 1
        assert 0 < r["grid/gigpo/anchor_group_size_mean"] and 0 <= r["grid/gigpo/anchor_steps_grouped_frac"] <= 1
        assert r["grid/episode/policy_tokens/mean"] > 0 and r["grid/episode/observation_tokens/mean"] >= 0
        # the faulty env: every failure counted by status, masked, and the run went on
        statuses = {s: r.get(f"faulty/reward/status/{s}", 0) for s in ("ok", "error", "invalid")}
        kept = r["faulty/scheduler/groups_kept"] * GROUP
        assert sum(statuses.values()) == kept
        assert r["faulty/episode/finish/env_error"] == statuses["error"]
        assert r["faulty/episode/finish/env_invalid"] == statuses["invalid"]
        assert r["math/reward/status/ok"] == 4 and "math/gigpo/anchor_group_size_mean" not in r
    assert sum(r.get("faulty/reward/status/error", 0) + r.get("faulty/reward/status/invalid", 0)
               for r in trained) > 0  # the failures really happened
    assert sum(r["batch/masked_samples"] for r in trained) > 0
    val = [r for r in records if "val_correct/all/mean" in r]
    assert [r["step"] for r in val] == [0, STEPS]
    for r in val:
        assert 0.0 <= r["val_correct/grid/mean"] <= 1.0 and "val/grid/episode/turns/mean" in r
