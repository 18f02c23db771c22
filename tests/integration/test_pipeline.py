"""The whole pipeline on local Ray with a tiny random model and the real math reward."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr.config.load import config_from_dict
from rlvr.pipeline.rlvr_pipeline import RLVRPipeline
from tests.conftest import REPO, tiny_config

pytestmark = pytest.mark.slow


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def run_pipeline(tree: dict) -> RLVRPipeline:
    return ran(RLVRPipeline(config_from_dict(tree)))


def ran(pipeline: RLVRPipeline) -> RLVRPipeline:
    """`pipeline` run to its last step; closed when the run fails, else the caller's to close."""
    try:
        pipeline.run()
    except BaseException:
        pipeline.close()
        raise
    return pipeline


@contextmanager
def resumed(tree: dict, run_dir: Path, max_steps: int):
    """`tree`'s run resumed from its latest checkpoint and run to `max_steps`: yields (the step it resumed at, the
    run's records); closed after."""
    tree["run"].update(max_steps=max_steps, resume="latest")
    pipeline = RLVRPipeline(config_from_dict(tree))
    try:
        assert pipeline.run_dir == run_dir
        start = pipeline.step
        pipeline.run()
        yield start, read_metrics(run_dir)
    finally:
        pipeline.close()


def test_two_steps_train_sync_and_log(tiny_model_dir, ray_local, tmp_path):
    pipeline = run_pipeline(tiny_config(tiny_model_dir, str(tmp_path)))
    try:
        records = read_metrics(pipeline.run_dir)
        train_steps = [r for r in records if "actor/loss" in r]
        assert [r["step"] for r in train_steps] == [0, 1]
        for r in train_steps:
            assert r["actor/updates"] == 1
            # every step synced weights and the inference side matched the trainer on a fixed sequence
            assert r["actor/weight_sync_logprob_max_diff"] < 1e-4
            assert r["arithmetic/scheduler/quota"] == 2 and r["word_problems/scheduler/quota"] == 2
            assert r["batch/samples"] == 8
            statuses = sum(r[f"{d}/reward/status/{s}"] for d in ("arithmetic", "word_problems")
                           for s in ("ok", "error", "timeout", "invalid"))
            assert statuses == 8  # every sample scored and counted
            # every worker measured itself: memory (a loaded model is well over 100 MiB), CPU since the last step
            for worker in ("actor_train/0", "actor_infer/0", "reward/arithmetic/0", "scheduler/word_problems"):
                assert r[f"system/{worker}/rss_gib"] > 0.1 and r[f"system/{worker}/cpu_percent"] >= 0
            assert r["system/train_tokens_per_s"] > 0 and r["system/response_tokens_per_s"] > 0
        val_steps = [r for r in records if "val_correct/all/mean" in r]
        assert [r["step"] for r in val_steps] == [0, 1, 2]  # eval_every=1, plus the final validation
        assert all("val_correct/arithmetic/mean" in r and "val_correct/word_problems/mean" in r for r in val_steps)

        # the weights moved, and the inference side holds the trained ones (a missed sync would show here)
        initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        trained = pipeline.clusters.actor_train.first("weights_for_sync")
        moved = max(float((trained[n] - p).abs().max()) for n, p in initial.named_parameters())
        assert moved > 1e-3
        probe = pipeline.sync_probe
        with torch.no_grad():
            init_lp = torch.log_softmax(initial(torch.tensor([probe])).logits[0, :-1], -1)
            init_lp = init_lp.gather(-1, torch.tensor(probe[1:])[:, None]).squeeze(-1)
        infer_lp = torch.tensor(pipeline.clusters.actor_infer.first("sequence_logprobs", [probe])[0][1:])
        assert float((infer_lp - init_lp).abs().max()) > 1e-2  # generation side no longer the initial policy
        assert pipeline.weight_sync_diff() < 1e-4  # ... but exactly the trained one
    finally:
        pipeline.close()


class WrongSyncPipeline(RLVRPipeline):
    """Every weight sync leaves actor_infer with a corrupted final norm (a broken sync, made on purpose)."""

    def __init__(self, cfg):
        super().__init__(cfg)
        push, infer = self.clusters.weight_sync.push, self.clusters.actor_infer

        def push_then_corrupt(version: int) -> dict[str, float]:
            metrics = push(version)
            weights = self.clusters.actor_train.first("weights_for_sync")
            infer.gather("load_weights", {**weights, "model.norm.weight": weights["model.norm.weight"] * 3}, version)
            return metrics

        self.clusters.weight_sync.push = push_then_corrupt


def test_a_wrong_sync_stops_the_run_before_anything_learns_from_it(tiny_model_dir, ray_local, tmp_path):
    """The logprob parity probe after the sync catches it: the run stops with the step and the difference, before
    any update (the trainer's weights are untouched) and before any step is logged."""
    tree = tiny_config(tiny_model_dir, str(tmp_path), run={"max_steps": 1, "eval_every": 0})
    pipeline = WrongSyncPipeline(config_from_dict(tree))
    try:
        before = pipeline.clusters.actor_train.first("weights_for_sync")
        with pytest.raises(RuntimeError, match="weight sync check failed at step 0"):
            pipeline.run()
        after = pipeline.clusters.actor_train.first("weights_for_sync")
        assert all(torch.equal(before[n], after[n]) for n in before)  # no update ran
        assert not (pipeline.run_dir / "metrics.jsonl").exists() or not read_metrics(pipeline.run_dir)
    finally:
        pipeline.close()


def test_kl_term_starts_reference_and_is_logged(tiny_model_dir, ray_local, tmp_path):
    tree = tiny_config(tiny_model_dir, str(tmp_path), run={"max_steps": 1, "eval_every": 0},
                       algorithm={"preset": "grpo", "kl_loss_coef": 0.1, "entropy_coef": 0.0},
                       actor_train={"mini_batch_size": 4})
    pipeline = run_pipeline(tree)
    try:
        assert pipeline.clusters.reference is not None
        (record,) = read_metrics(pipeline.run_dir)
        assert record["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6) or record["actor/kl_loss"] >= 0
        assert record["actor/updates"] == 2  # two mini-batches of 4: old logprobs were computed
        assert "time/forwards" in record and "time/advantages" in record
    finally:
        pipeline.close()


def test_resume_continues_step_and_data_cursor(tiny_model_dir, ray_local, tmp_path):
    tree = tiny_config(tiny_model_dir, str(tmp_path), run={"max_steps": 2, "eval_every": 0, "save_every": 1})
    first = run_pipeline(tree)
    run_dir = first.run_dir
    first.close()
    ckpt = run_dir / "checkpoints" / "step_000002"
    state = json.loads((ckpt / "driver.json").read_text())
    assert state["step"] == 2
    assert {d: s["pos"] for d, s in state["schedulers"].items()} == {"arithmetic": 4, "word_problems": 4}

    tree["run"].update(max_steps=3, resume="latest")
    second = RLVRPipeline(config_from_dict(tree))
    try:
        assert second.run_dir == run_dir and second.step == 2
        second.run()
        steps = [r["step"] for r in read_metrics(run_dir)]
        assert steps == [0, 1, 2]
        state = json.loads((run_dir / "checkpoints" / "step_000003" / "driver.json").read_text())
        assert {d: s["pos"] for d, s in state["schedulers"].items()} == {"arithmetic": 6, "word_problems": 6}
        assert state["tracker_run_id"] == json.loads((ckpt / "driver.json").read_text())["tracker_run_id"]
    finally:
        second.close()


def test_failed_rewards_are_masked_counted_and_training_goes_on(tiny_model_dir, ray_local, tmp_path):
    failing = {"worker": "tests.helpers.rewards.FailingEveryOtherRewardForTest", "timeout_s": 1.0, "max_retries": 0}
    tree = tiny_config(tiny_model_dir, str(tmp_path), run={"max_steps": 1, "eval_every": 0},
                       rollout={"group_size": 4})
    # one domain: every row routed to it through the tag map (the shipped rows' `domain` column used as a tag)
    tree["domains"] = {"arithmetic": {"reward": failing}}
    tree["data"].update(val_files=[], domain_key="no_such_column", tag_key="domain",
                        tag_to_domain={"arithmetic": "arithmetic", "word_problems": "arithmetic"})
    tree["rollout"].pop("domain_interleave_probs")
    pipeline = run_pipeline(tree)
    try:
        (record,) = read_metrics(pipeline.run_dir)
        assert record["arithmetic/reward/status/error"] == 8  # indices 1 and 3 of 4 groups
        assert record["arithmetic/reward/status/timeout"] == 4  # index 2 hung past the 1 s deadline
        assert record["arithmetic/reward/status/ok"] == 4
        assert record["batch/masked_samples"] == 12 and record["batch/samples"] == 16
        assert record["actor/updates"] == 1
    finally:
        pipeline.close()


def test_rollout_correction_measures_and_rejects_in_the_on_policy_update(tiny_model_dir, ray_local, tmp_path):
    """On-policy single update (the PPO ratio is 1 by construction): the trainer's logprobs come from one extra
    forward, the mismatch with the engine's is logged, and token rejection keeps tokens out of the loss."""
    tree = tiny_config(tiny_model_dir, str(tmp_path), run={"max_steps": 1, "eval_every": 0},
                       algorithm={"preset": "grpo", "rollout_correction": {"rs_level": "token", "rs_threshold": 1.5,
                                                                           "is_level": "geometric"}})
    pipeline = run_pipeline(tree)
    try:
        (record,) = read_metrics(pipeline.run_dir)
        assert pipeline.cfg.generation.return_logprobs  # turned on by the correction
        for key in ("kl", "k3_kl", "chi2_token", "chi2_seq", "ppl_ratio", "training_ppl", "rollout_ppl",
                    "rollout_is_eff_sample_size", "rollout_is_mean", "rollout_rs_masked_fraction"):
            assert f"rollout_corr/{key}" in record, key
        assert record["rollout_corr/k3_kl"] >= 0 and 0 < record["rollout_corr/rollout_is_eff_sample_size"] <= 1
        assert 0 <= record["rollout_corr/rollout_rs_masked_fraction"] <= 1
        assert record["rollout_corr/rollout_is_max"] <= 2.0 + 1e-6  # truncated at is_threshold
        assert record["actor/updates"] == 1
    finally:
        pipeline.close()


def test_is_only_correction_weighs_the_tokens_inside_the_update(tiny_model_dir, ray_local, tmp_path):
    """IS only, on-policy, one update: the actor weighs the tokens from its update's own forward and returns those
    logprobs (actor_train.train_with_logprobs, through Ray), and the rollout_corr/* metrics come from them."""
    tree = tiny_config(tiny_model_dir, str(tmp_path), run={"max_steps": 1, "eval_every": 0},
                       algorithm={"preset": "grpo", "rollout_correction": {"is_level": "token", "is_threshold": 1.5}})
    pipeline = run_pipeline(tree)
    try:
        assert pipeline.cfg.corrects_in_update
        (record,) = read_metrics(pipeline.run_dir)
        for key in ("kl", "k3_kl", "chi2_token", "training_ppl", "rollout_is_eff_sample_size", "rollout_is_mean"):
            assert f"rollout_corr/{key}" in record, key
        assert record["rollout_corr/training_ppl"] > 1  # the trainer's logprobs, not zeros
        assert 0 < record["rollout_corr/rollout_is_max"] <= 1.5 + 1e-6  # truncated at is_threshold
        assert "rollout_corr/rollout_rs_masked_fraction" not in record
        assert record["actor/updates"] == 1
    finally:
        pipeline.close()
