"""algorithm=ppo through the whole pipeline on local Ray with a tiny model: a critic cluster and a reference start,
the critic warms up alone, the critic and KL metrics reach metrics.jsonl, TensorBoard and W&B (offline), and a
resumed run gets the critic, the KL controller and the running reward moments back from the checkpoint."""

from __future__ import annotations

import json

import pytest

from rlvr.config.load import config_from_dict
from rlvr.pipeline.rlvr_pipeline import RLVRPipeline
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow

CRITIC_KEYS = ("critic/value_loss", "critic/vf_explained_var", "critic/values/mean", "critic/clipfrac")
KL_COEF = "actor/reward_kl_penalty_coeff"


def ppo_tree(model_dir: str, output_dir: str) -> dict:
    return tiny_config(
        model_dir, output_dir, run={"max_steps": 2, "eval_every": 0, "save_every": 1},
        trackers={"wandb": True, "tensorboard": True, "jsonl": True},
        # an adaptive controller with a tiny target: the coefficient moves every step
        algorithm={"preset": "ppo", "entropy_coef": 0.0,
                   "kl_ctrl": {"type": "adaptive", "kl_coef": 0.05, "target_kl": 1e-6, "horizon": 10},
                   "reward_processing": {"norm_mean_type": "running"}},
        critic={"lr": 1e-3, "micro_batch_size": 4, "bf16_autocast": False, "critic_warmup": 1})


def next_coef(coef: float, kl: float) -> float:
    return coef * (1 + min(max(kl / 1e-6 - 1, -0.2), 0.2) * 8 / 10)


def read_metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_ppo_trains_a_critic_logs_it_everywhere_and_resumes_it(tiny_model_dir, ray_local, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    tree = ppo_tree(tiny_model_dir, str(tmp_path))
    pipeline = RLVRPipeline(config_from_dict(tree))
    try:
        assert pipeline.clusters.critic is not None and pipeline.clusters.reference is not None
        pipeline.run()
        run_dir = pipeline.run_dir
    finally:
        pipeline.close()

    records = read_metrics(run_dir)
    assert [r["step"] for r in records] == [0, 1]
    warmup, trained = records
    assert warmup["actor/critic_warmup"] == 1.0 and "actor/loss" not in warmup  # only the critic trained
    assert "actor/loss" in trained and "actor/critic_warmup" not in trained
    for r in records:
        for key in CRITIC_KEYS + (KL_COEF, "actor/reward_kl_penalty", "critic/returns/mean", "critic/grad_norm"):
            assert key in r, (r["step"], key)
        assert r["critic/updates"] == 1 and "time/forwards" in r and "time/critic_train" in r
    assert warmup[KL_COEF] == pytest.approx(0.05)
    # Ziegler's rule with this step's KL, 8 sequences, horizon 10
    assert trained[KL_COEF] == pytest.approx(next_coef(0.05, warmup["actor/reward_kl_penalty"]))

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    assert set(CRITIC_KEYS + (KL_COEF,)) <= set(events.Tags()["scalars"])
    (wandb_file,) = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    logged = wandb_file.read_bytes()
    assert all(key.encode() in logged for key in CRITIC_KEYS + (KL_COEF,))

    ckpt = run_dir / "checkpoints" / "step_000002"
    assert (ckpt / "critic" / "model" / "rlvr_value_model.json").exists()
    saved = json.loads((ckpt / "driver.json").read_text())["advantages"]
    assert saved["kl_ctrl"]["value"] == pytest.approx(next_coef(trained[KL_COEF], trained["actor/reward_kl_penalty"]))
    assert saved["running"]["arithmetic"]["count"] > 0

    tree["run"].update(max_steps=3, resume="latest")
    resumed = RLVRPipeline(config_from_dict(tree))
    try:
        assert resumed.step == 2
        assert resumed.advantages.kl_ctrl.value == pytest.approx(saved["kl_ctrl"]["value"])
        assert resumed.advantages.running["arithmetic"].count == saved["running"]["arithmetic"]["count"]
        resumed.run()
    finally:
        resumed.close()
    last = read_metrics(run_dir)[-1]
    assert last["step"] == 2 and last[KL_COEF] == pytest.approx(saved["kl_ctrl"]["value"])
    assert all(key in last for key in CRITIC_KEYS) and "actor/loss" in last
