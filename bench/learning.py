"""Learning curves of the main job, one algorithm or several side by side, on SmolLM2-135M-Instruct over the shipped
math data.

    .venv/bin/python bench/learning.py [--steps 20] [--eval-every 2] [--algorithms grpo ppo ...] [key=value ...]

Each algorithm (an `algorithm` preset) runs with the same config, data, steps and seed, one after the other in this
process. With one algorithm it prints a table per step: mean training reward per domain and, on validation steps,
val_correct per domain and overall (greedy decoding on the held-out split). With several it prints one table of
val_correct per domain every `--eval-every` steps per algorithm, then each algorithm's step time (median and
range over its training steps after step 0, validation excluded) and its ratio to the first algorithm's, the
critic's and the reference's cost included. A benchmark, not a test: the trend is reported as it comes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def run(config: str, algorithm: str | None, args, overrides: list[str]) -> tuple[object, dict[int, dict], float]:
    from rlvr.config.load import load_config
    from rlvr.pipeline.rlvr_pipeline import RLVRPipeline

    name = f"bench-learning-{algorithm}" if algorithm else "bench-learning"
    base = [f"run.max_steps={args.steps}", f"run.eval_every={args.eval_every}", "run.save_every=0",
            f"run.name={name}", "trackers.wandb=false", "trackers.tensorboard=false"]
    cfg = load_config(config, base + ([f"algorithm={algorithm}"] if algorithm else []) + overrides)
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
    print(f"{algorithm or cfg.algorithm.preset}: {elapsed:.0f}s, run {run_dir}", flush=True)
    return cfg, records, elapsed


def fmt(v) -> str:
    return "" if v is None else f"{v:.3f}"


def curve_table(cfg, records: dict[int, dict]) -> None:
    domains = list(cfg.domains)
    cols = ["step"] + [f"reward/{d}" for d in domains] + [f"val/{d}" for d in domains] + ["val/all", "step_s"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for step in sorted(records):
        r = records[step]
        row = [str(step)] + [fmt(r.get(f"{d}/reward/mean")) for d in domains]
        row += [fmt(r.get(f"val_correct/{d}/mean")) for d in domains]
        row += [fmt(r.get("val_correct/all/mean")), fmt(r.get("time/step"))]
        print("| " + " | ".join(row) + " |")


def step_times(records: dict[int, dict]) -> list[float]:
    """Training-step seconds (the phases of the step, validation excluded), step 0 left out when there are others
    (its first calls warm caches and allocators)."""
    times = {s: r["time/step"] - r.get("time/val", 0.0) for s, r in records.items() if "time/step" in r}
    return [t for s, t in sorted(times.items()) if s > 0 or len(times) == 1]


def comparison_tables(cfg, results: dict[str, dict[int, dict]]) -> None:
    domains = list(cfg.domains)
    algos = list(results)
    val_steps = sorted({s for recs in results.values() for s, r in recs.items() if "val_correct/all/mean" in r})
    cols = ["step"] + [f"{a} {d}" for a in algos for d in domains + ["all"]]
    print("\nval_correct (greedy, held-out) per domain and overall\n")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for step in val_steps:
        row = [str(step)]
        for a in algos:
            r = results[a].get(step, {})
            row += [fmt(r.get(f"val_correct/{d}/mean")) for d in domains] + [fmt(r.get("val_correct/all/mean"))]
        print("| " + " | ".join(row) + " |")
    base = statistics.median(step_times(results[algos[0]]))
    print(f"\nstep time (training steps 1.., validation excluded), ratio to {algos[0]}\n")
    print("| algorithm | median s | min-max s | ratio | mean train reward | last val_correct/all |")
    print("|---|---|---|---|---|---|")
    for a in algos:
        times = step_times(results[a])
        med = statistics.median(times)
        rewards = [statistics.mean(r[f"{d}/reward/mean"] for d in domains if f"{d}/reward/mean" in r)
                   for r in results[a].values() if any(f"{d}/reward/mean" in r for d in domains)]
        last_val = results[a][val_steps[-1]].get("val_correct/all/mean") if val_steps else None
        print(f"| {a} | {med:.1f} | {min(times):.1f}-{max(times):.1f} | {med / base:.2f} | "
              f"{statistics.mean(rewards):.3f} | {fmt(last_val)} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--config", default=str(REPO / "configs/math.yaml"))
    parser.add_argument("--algorithms", nargs="+", default=None,
                        help="presets to compare side by side (the first is the baseline of the time ratios)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.algorithms:  # key=value overrides written after --algorithms land in its list: move them back
        args.overrides += [a for a in args.algorithms if "=" in a]
        args.algorithms = [a for a in args.algorithms if "=" not in a]

    results: dict[str, dict[int, dict]] = {}
    cfg = None
    for algorithm in args.algorithms or [None]:
        cfg, records, _ = run(args.config, algorithm, args, args.overrides)
        results[algorithm or cfg.algorithm.preset] = records
    print(f"\nmodel={cfg.model.path} prompts/step={cfg.rollout.prompts_per_step} group={cfg.rollout.group_size} "
          f"max_new_tokens={cfg.generation.max_new_tokens} lr={cfg.actor_train.lr} steps={args.steps} "
          f"seed={cfg.run.seed} bf16={cfg.actor_train.bf16_autocast} overrides={args.overrides} "
          f"machine={platform.machine()} cpus={os.cpu_count()}")
    if len(results) == 1:
        curve_table(cfg, next(iter(results.values())))
    else:
        comparison_tables(cfg, results)


if __name__ == "__main__":
    main()
