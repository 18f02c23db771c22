"""Learning curve of the main job: ~20 GRPO steps on SmolLM2-135M-Instruct over the shipped math data.

    .venv/bin/python bench/learning.py [--steps 20] [--eval-every 2] [key=value ...]

Prints one table: per step the mean training reward per domain and, on validation steps, val_correct per domain
and overall (greedy decoding on the held-out split). A benchmark, not a test: the trend is reported as it comes.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--config", default=str(REPO / "configs/math.yaml"))
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()

    from rlvr.config import load_config
    from rlvr.pipeline.rlvr_pipeline import RLVRPipeline

    overrides = [f"run.max_steps={args.steps}", f"run.eval_every={args.eval_every}", "run.save_every=0",
                 "run.name=bench-learning", "trackers.wandb=false", "trackers.tensorboard=false", *args.overrides]
    cfg = load_config(args.config, overrides)
    start = time.perf_counter()
    pipeline = RLVRPipeline(cfg)
    try:
        run_dir = pipeline.run()
    finally:
        pipeline.close()
    elapsed = time.perf_counter() - start

    records: dict[int, dict] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        records.setdefault(r["step"], {}).update(r)
    domains = list(cfg.domains)
    cols = ["step"] + [f"reward/{d}" for d in domains] + [f"val/{d}" for d in domains] + ["val/all", "step_s"]
    print(f"\nmodel={cfg.model.path} prompts/step={cfg.rollout.prompts_per_step} group={cfg.rollout.group_size} "
          f"max_new_tokens={cfg.generation.max_new_tokens} lr={cfg.actor_train.lr} algorithm={cfg.algorithm.preset} "
          f"machine={platform.machine()} cpus={__import__('os').cpu_count()} wall={elapsed:.0f}s run={run_dir}")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))

    def fmt(v):
        return "" if v is None else f"{v:.3f}"

    for step in sorted(records):
        r = records[step]
        row = [str(step)] + [fmt(r.get(f"{d}/reward/mean")) for d in domains]
        row += [fmt(r.get(f"val_correct/{d}/mean")) for d in domains]
        row += [fmt(r.get("val_correct/all/mean")), fmt(r.get("time/step"))]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
