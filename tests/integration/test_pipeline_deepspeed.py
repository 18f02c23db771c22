"""The pipeline with actor_train on DeepSpeed ZeRO-2, world_size 2 (two Ray actors in one gloo process group): every
actor_train call reaches both ranks (train, logprobs, weight sync, save, load), the reference worker follows the
strategy, and a run resumes from a DeepSpeed checkpoint."""

from __future__ import annotations

import json

import pytest

from tests.conftest import tiny_config
from tests.integration.test_pipeline import read_metrics, resumed, run_pipeline

pytestmark = pytest.mark.slow
pytest.importorskip("deepspeed")


def test_zero2_world_size_2_trains_syncs_and_resumes(tiny_model_dir, ray_local, tmp_path):
    tree = tiny_config(
        tiny_model_dir, str(tmp_path), run={"max_steps": 2, "eval_every": 0, "save_every": 2},
        algorithm={"preset": "grpo", "kl_loss_coef": 0.1, "entropy_coef": 0.01},
        # fp32 weights with bf16 autocast: the weight-sync check's forward is fp32 on both sides
        actor_train={"strategy": "deepspeed", "world_size": 2, "deepspeed": {"zero_stage": 2}, "bf16_weights": False,
                     "bf16_autocast": True, "mini_batch_size": 4, "micro_batch_size": 2})
    first = run_pipeline(tree)
    run_dir = first.run_dir
    try:
        assert len(first.clusters.actor_train) == 2
        records = read_metrics(run_dir)
        assert [r["step"] for r in records] == [0, 1]
        for r in records:
            assert r["actor/updates"] == 2  # two mini-batches of 4: the old-logprob pass ran on both ranks
            assert r["actor/weight_sync_logprob_max_diff"] < 1e-4  # rank 0's weights reached actor_infer
            assert "time/forwards" in r and r["actor/kl_loss"] >= 0
        assert records[1]["actor/kl_loss"] > 0  # the policy moved away from the reference
    finally:
        first.close()
    saved = run_dir / "checkpoints" / "step_000002" / "actor_train"
    assert {p.name for p in saved.iterdir()} >= {"deepspeed", "model", "train_state_rank0.pt", "train_state_rank1.pt"}

    # The resumed step packs its micro-batches (96-token streams): each rank bins its own rows, and the ranks
    # agree on the most bins any has (their backward passes meet in ZeRO's reductions).
    tree["actor_train"]["max_tokens_per_micro_batch"] = 96
    with resumed(tree, run_dir, max_steps=3) as (start, records):
        assert start == 2 and [r["step"] for r in records] == [0, 1, 2]
        assert records[2]["actor/weight_sync_logprob_max_diff"] < 1e-4
        assert records[2]["actor/updates"] == 2 and records[2]["actor/kl_loss"] >= 0
        assert json.loads((run_dir / "checkpoints" / "step_000002" / "driver.json").read_text())["step"] == 2
