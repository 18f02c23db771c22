"""LoRA through the whole pipeline (local Ray, the tiny model, the torch strategy): PPO with adapters on actor_train
and on the critic, a KL term whose reference is actor_train with its adapters off (no reference worker), the merged
weights reaching actor_infer (the logprob parity probe holds), adapter-only checkpoints that a run resumes from, and
`rlvr.export` of one loading in transformers as a plain model with the adapters merged."""

from __future__ import annotations

import pytest
import torch

from rlvr.backends.lora import ADAPTER_DIR, ADAPTER_WEIGHTS
from tests.conftest import tiny_config
from tests.integration.test_pipeline import read_metrics, resumed, run_pipeline

pytestmark = pytest.mark.slow


def lora_tree(model_dir: str, output_dir: str) -> dict:
    return tiny_config(
        model_dir, output_dir, run={"max_steps": 2, "eval_every": 0, "save_every": 2},
        algorithm={"preset": "ppo", "entropy_coef": 0.0, "kl_ctrl": {"type": "fixed", "kl_coef": 0.1}},
        actor_train={"lr": 1e-2, "micro_batch_size": 4, "bf16_autocast": False, "lora": {"rank": 4}},
        critic={"lr": 1e-3, "micro_batch_size": 4, "bf16_autocast": False, "lora": {"rank": 2}})


def test_lora_actor_and_critic_train_sync_save_resume_and_export(tiny_model_dir, ray_local, tmp_path):
    from transformers import AutoModelForCausalLM

    from rlvr.cli.export import main as export_main

    tree = lora_tree(tiny_model_dir, str(tmp_path))
    first = run_pipeline(tree)
    run_dir = first.run_dir
    try:
        assert first.clusters.reference is None and first.clusters.critic is not None
        records = read_metrics(run_dir)
        assert [r["step"] for r in records] == [0, 1]
        for r in records:
            assert r["actor/weight_sync_logprob_max_diff"] < 1e-4  # the merged weights reached the engine
            assert r["critic/updates"] == 1
        # the KL in the reward is against the base model: 0 before the first update, not after it
        assert records[0]["actor/reward_kl_penalty"] == pytest.approx(0.0, abs=1e-6)
        assert records[1]["actor/reward_kl_penalty"] != pytest.approx(0.0, abs=1e-6)
    finally:
        first.close()

    ckpt = run_dir / "checkpoints" / "step_000002"
    for trainer in ("actor_train", "critic"):
        assert (ckpt / trainer / ADAPTER_DIR / ADAPTER_WEIGHTS).exists(), trainer
        assert not (ckpt / trainer / "model").exists(), trainer  # no full weights stored
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model_bytes = sum(p.numel() * 4 for p in base.parameters())
    assert sum(f.stat().st_size for f in (ckpt / "actor_train").rglob("*") if f.is_file()) < model_bytes

    with resumed(tree, run_dir, max_steps=3) as (start, records):
        assert start == 2 and [r["step"] for r in records] == [0, 1, 2]
        assert records[2]["actor/weight_sync_logprob_max_diff"] < 1e-4  # the resumed adapters reached the engine
        assert records[2]["actor/reward_kl_penalty"] != pytest.approx(0.0, abs=1e-6)  # not back at the base

    out = tmp_path / "exported"
    assert export_main([str(run_dir), "--step", "2", "--out", str(out)]) == 0
    exported = AutoModelForCausalLM.from_pretrained(out)
    assert {n for n, _ in exported.named_parameters()} == {n for n, _ in base.named_parameters()}
    moved = [n for (n, p), q in zip(exported.named_parameters(), base.parameters()) if not torch.equal(p, q)]
    assert moved and all("proj" in n for n in moved)  # the adapted layers, merged; nothing else
    ids = torch.tensor([[1, 2, 3]])
    assert exported.generate(ids, max_new_tokens=3, do_sample=False).shape[1] >= 4
