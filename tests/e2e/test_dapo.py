"""algorithm=dapo on the default model for two steps: dynamic-sampling counters reach the trackers."""

from __future__ import annotations

import json

import pytest

from rlvr.config.load import load_config
from rlvr.pipeline.rlvr_pipeline import RLVRPipeline
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def test_dapo_two_steps_logs_filter_metrics(default_model_dir, ray_local, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = load_config(REPO / "configs/math.yaml", [
        "algorithm=dapo", "run.max_steps=2", "run.eval_every=0", "run.save_every=0", f"run.output_dir={tmp_path}",
        "run.progress_bar=false", "rollout.prompts_per_step=4", "rollout.max_refill_rounds=2",
        "generation.max_new_tokens=32", "trackers.wandb=false"])
    assert cfg.algorithm.clip_eps_high == 0.28 and cfg.rollout.filter.zero_spread
    pipeline = RLVRPipeline(cfg)
    try:
        pipeline.run()
        run_dir = pipeline.run_dir
    finally:
        pipeline.close()
    records = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1]
    for r in records:
        for d in ("arithmetic", "word_problems"):
            started, kept = r[f"{d}/scheduler/prompts_started"], r[f"{d}/scheduler/groups_kept"]
            dropped = sum(v for k, v in r.items() if k.startswith(f"{d}/filter/dropped_"))
            assert started >= kept - r[f"{d}/scheduler/carried_used"]
            assert dropped == started - (kept - r[f"{d}/scheduler/carried_used"]) - r.get(
                f"{d}/scheduler/aborted", 0) - r.get(f"{d}/scheduler/finishing_late", 0) - r.get(
                f"{d}/scheduler/carried_over", 0) - r.get(f"{d}/scheduler/generation_errors", 0)
            assert kept + r[f"{d}/scheduler/quota_shortfall"] == 2
        # overlong shaping: 32-token limit, cache 8: truncated answers are penalised, so rewards can be < 0
        assert "actor/clipfrac" in r

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"arithmetic/scheduler/prompts_started", "word_problems/filter/kept_frac"} & tags
    assert any(t.startswith("arithmetic/filter/dropped_") for t in tags) or "arithmetic/filter/kept_frac" in tags
