"""Learning curves of the main job, one algorithm or several side by side, on SmolLM2-135M-Instruct over the shipped
math data.

    .venv/bin/python bench/learning.py [--steps 20] [--eval-every 2] [--algorithms grpo ppo ...] [key=value ...]
    .venv/bin/python bench/learning.py --seeds 1 2 3 --variant fp32 actor_train.bf16_autocast=false \
        --variant bf16 actor_train.bf16_autocast=true generation.dtype=bfloat16 ...
    .venv/bin/python bench/learning.py --lora --seeds 1 2 3 --steps 8 --eval-every 4   # LoRA ranks vs full
    .venv/bin/python bench/learning.py --algorithms grpo dapo ... --seeds 1 2 3 --steps 8 --eval-every 4 \
        --out bench/results/algorithms.jsonl --resume        # a sweep over sittings: runs only what --out lacks

Each algorithm (an `algorithm` preset) or named variant (a set of overrides) runs with the same config, data, steps
and seed, one after the other in this process; with several seeds the runs go seed by seed, every variant once per
seed, so a cut-short bench still compares like with like, and the tables give mean +- standard error over seeds
(sample standard deviation / sqrt(n)) with the final difference in units of the pooled standard error
sqrt(se_a^2 + se_b^2). Each finished run's records are appended to --out (JSON lines) as it ends; with `--resume`
the runs already there (same variant, seed and number of steps) are skipped, so a sweep longer than one sitting
goes on where it stopped by repeating its command.

With one algorithm it prints a table per step: mean training reward per domain and, on validation steps,
val_correct per domain and overall (greedy decoding on the held-out split). With several it prints one table of
val_correct per domain every `--eval-every` steps per algorithm, then each algorithm's step time (median and
range over its training steps after step 0, validation excluded) and its ratio to the first algorithm's, the
critic's and the reference's cost included. A benchmark, not a test: the trend is reported as it comes.

`--lora` compares full fine-tuning (the config as it is) with LoRA at ranks 8 and 32 (`--lora-lr`, default 1e-4:
adapters take about 10x full fine-tuning's best rate, as "LoRA Without Regret" (Thinking Machines, 2025) measured),
and adds a resource table: actor_train's training seconds per step, its largest sampled resident memory
(`system/actor_train/0/rss_gib`, sampled once per step) and the size of the checkpoint each run saves after its
last step (`--save-last`, implied; the checkpoints are deleted once measured).
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


def run(config: str, label: str, args, overrides: list[str]) -> tuple[object, dict[int, dict], float]:
    import shutil

    from rlvr.config.load import load_config
    from rlvr.pipeline.checkpoint import list_checkpoints
    from rlvr.pipeline.rlvr_pipeline import RLVRPipeline
    from rlvr.report.summary import size_bytes

    save = f"run.save_every={args.steps if args.save_last else 0}"
    base = [f"run.max_steps={args.steps}", f"run.eval_every={args.eval_every}", save, "run.keep_checkpoints=1",
            f"run.name=bench-learning-{label}", "trackers.wandb=false", "trackers.tensorboard=false"]
    cfg = load_config(config, base + overrides)
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
    if args.save_last:  # measured, then gone: a full-weights checkpoint of the default model is 2 GB
        checkpoints = list_checkpoints(run_dir)
        records[max(records)]["bench/checkpoint_bytes"] = size_bytes(checkpoints[-1])
        for c in checkpoints:
            shutil.rmtree(c)
    print(f"{label} seed {cfg.run.seed}: {elapsed:.0f}s, run {run_dir}", flush=True)
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


def variants_of(args) -> dict[str, list[str]]:
    """label -> overrides of each compared run: the --variant lists, else one per --algorithms preset, else one."""
    if args.variant:
        return {v[0]: v[1:] for v in args.variant}
    if args.lora:
        lr = f"actor_train.lr={args.lora_lr}"
        return {"full": [], "lora-r8": ["actor_train.lora.rank=8", lr], "lora-r32": ["actor_train.lora.rank=32", lr]}
    if args.algorithms:
        return {a: [f"algorithm={a}"] for a in args.algorithms}
    return {"run": []}


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error (sample standard deviation / sqrt(n); 0 for one value)."""
    mean = statistics.mean(values)
    return mean, (statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0)


def mean_pm_se(values: list[float]) -> str:
    """"mean +- SE", or the bare value for one seed: a standard error of 0 there would claim a precision that one
    run cannot show."""
    mean, se = mean_se(values)
    return f"{mean:.3f} +- {se:.3f}" if len(values) > 1 else f"{mean:.3f}"


def pooled_difference(values: list[float], base: list[float]) -> tuple[float, str]:
    """(mean(values) - mean(base), that difference in pooled standard errors sqrt(se_a^2 + se_b^2) as "+1.23", or
    "n/a" with one seed on either side: there is no spread to measure the difference against)."""
    (mean, se), (base_mean, base_se) = mean_se(values), mean_se(base)
    pooled = (se ** 2 + base_se ** 2) ** 0.5
    return mean - base_mean, (f"{(mean - base_mean) / pooled:+.2f}" if pooled and min(len(values), len(base)) > 1
                              else "n/a")


def seed_tables(cfg, runs: dict[str, dict[int, dict[int, dict]]]) -> None:
    """val_correct/all per evaluation (mean +- SE over seeds), the final values against the first variant in pooled
    standard errors, the step times, and the mean rollout-trainer mismatch per variant where it was measured."""
    labels = list(runs)
    val_steps = sorted({s for by_seed in runs.values() for recs in by_seed.values() for s, r in recs.items()
                        if "val_correct/all/mean" in r})

    def vals(label: str, step: int, key: str = "val_correct/all/mean") -> list[float]:
        return [recs[step][key] for recs in runs[label].values() if key in recs.get(step, {})]

    print("\nval_correct/all (greedy, held-out), mean +- standard error over seeds\n")
    print("| step | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    for step in val_steps:
        cells = [(mean_pm_se(v) if (v := vals(label, step)) else "") for label in labels]
        print(f"| {step} | " + " | ".join(cells) + " |")
    last = val_steps[-1]
    base_vals = vals(labels[0], last)
    print(f"\nfinal (step {last}) and its difference to {labels[0]} in pooled standard errors "
          "sqrt(se_a^2 + se_b^2); step time: median over all seeds' training steps 1.., validation excluded\n")
    print(f"| variant | seeds | val_correct/all at step 0 | final | final - {labels[0]} | in pooled SE | "
          "step s (median) |")
    print("|---|---|---|---|---|---|---|")
    for label in labels:
        final = vals(label, last)
        diff, z = pooled_difference(final, base_vals)
        first = mean_pm_se(vals(label, val_steps[0]))
        times = [t for recs in runs[label].values() for t in step_times(recs)]
        print(f"| {label} | {len(runs[label])} | {first} | {mean_pm_se(final)} | {diff:+.3f} | "
              f"{z} | {statistics.median(times):.1f} |")
    keys = ["rollout_corr/k3_kl", "rollout_corr/kl", "rollout_corr/ppl_ratio", "rollout_corr/chi2_token",
            "rollout_corr/chi2_seq", "rollout_corr/rollout_is_eff_sample_size", "rollout_corr/rollout_is_max",
            "rollout_corr/rollout_is_ratio_fraction_high"]
    measured = [label for label in labels
                if any(k in r for recs in runs[label].values() for r in recs.values() for k in keys)]
    if measured:
        print("\nrollout-trainer mismatch (mean over seeds and steps; min-max over steps of the seed mean)\n")
        print("| variant | " + " | ".join(k.split("/", 1)[1].removeprefix("rollout_") for k in keys) + " |")
        print("|---|" + "---|" * len(keys))
        for label in measured:
            cells = []
            for k in keys:
                per_step = [statistics.mean(v) for s in sorted({s for recs in runs[label].values() for s in recs})
                            if (v := vals(label, s, k))]
                cells.append(f"{statistics.mean(per_step):.3g} ({min(per_step):.3g}-{max(per_step):.3g})"
                             if per_step else "")
            print(f"| {label} | " + " | ".join(cells) + " |")


def resource_table(runs: dict[str, dict[int, dict[int, dict]]]) -> None:
    """actor_train's cost per variant over all seeds: training seconds per step (median, steps 1..), weight sync
    seconds (merge, send, parity probe), largest sampled resident memory, checkpoint size (where the runs saved
    one)."""
    print("\nactor_train per variant (all seeds): medians over steps 1.., largest sampled RSS, checkpoint size\n")
    print("| variant | train s | ratio | weight sync s | step s | actor_train RSS max GiB | checkpoint MB |")
    print("|---|---|---|---|---|---|---|")
    base = None
    for label, by_seed in runs.items():
        recs = [r for records in by_seed.values() for s, r in records.items() if s > 0]
        train = statistics.median(r["time/train"] for r in recs if "time/train" in r)
        base = base or train
        rss = max((r.get("system/actor_train/0/rss_gib", 0.0) for r in recs), default=0.0)
        sizes = [r["bench/checkpoint_bytes"] for r in recs if "bench/checkpoint_bytes" in r]
        steps = statistics.median(t for records in by_seed.values() for t in step_times(records))
        sync = statistics.median(r["time/model_update"] for r in recs if "time/model_update" in r)
        size = f"{statistics.mean(sizes) / 1e6:.1f}" if sizes else ""
        print(f"| {label} | {train:.1f} | {train / base:.2f} | {sync:.1f} | {steps:.1f} | {rss:.2f} | {size} |")


def cpu_name() -> str:
    """The CPU's model name (its step times say little without it: this box's kind has come as a Xeon with
    AMX-BF16 and as an AVX2 EPYC about 2x slower in fp32)."""
    from rlvr.config.precision import cpuinfo_field

    info = Path("/proc/cpuinfo")
    name = cpuinfo_field(info.read_text(), "model name") if info.exists() else ""
    return name or platform.processor() or platform.machine()


def finished_runs(path: str | None, steps: int) -> set[tuple[str, int | None]]:
    """(variant, seed) of the runs `path` already holds with `steps` training steps (its last record is the
    validation after step `steps`); a run of another length is not the same run, so it does not count."""
    if not path or not Path(path).exists():
        return set()
    return {(row["variant"], row["seed"]) for row in read_rows([path])
            if max(int(k) for k in row["records"]) == steps}


def read_rows(paths: list[str]) -> list[dict]:
    """The records of these JSON-lines files (--out of this bench or of bench/race.py), in order."""
    return [json.loads(line) for path in paths for line in Path(path).read_text().splitlines()]


def print_loaded(args) -> None:
    from rlvr.config.load import load_config

    runs: dict[str, dict[int | None, dict[int, dict]]] = {}
    cpus: set[str] = set()
    for row in read_rows(args.load):
        runs.setdefault(row["variant"], {})[row["seed"]] = {int(k): v for k, v in row["records"].items()}
        cpus.add(row.get("cpu", "unrecorded"))
    cfg = load_config(args.config, args.overrides)
    print(f"loaded {', '.join(args.load)}: {', '.join(f'{v} seeds {sorted(r)}' for v, r in runs.items())}; "
          f"CPUs: {', '.join(sorted(cpus))}")
    seed_tables(cfg, runs)
    resource_table(runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--config", default=str(REPO / "configs/math.yaml"))
    parser.add_argument("--algorithms", nargs="+", default=None,
                        help="presets to compare side by side (the first is the baseline of the time ratios)")
    parser.add_argument("--variant", nargs="+", action="append", metavar=("NAME", "KEY=VALUE"),
                        help="a named set of overrides to compare (repeat the flag; the first is the baseline)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="run.seed of each repetition")
    parser.add_argument("--out", default=None, help="append each finished run's records here (JSON lines)")
    parser.add_argument("--load", nargs="+", default=None, metavar="JSONL",
                        help="print the tables of earlier benches' --out files (several: their variants side by "
                             "side, the first file's first variant the baseline) instead of running")
    parser.add_argument("--lora", action="store_true",
                        help="full fine-tuning against LoRA ranks 8 and 32, with the resource table")
    parser.add_argument("--lora-lr", type=float, default=1e-4, help="actor_train.lr of the LoRA variants")
    parser.add_argument("--resume", action="store_true",
                        help="skip the runs --out already holds (same variant, seed and --steps)")
    parser.add_argument("--save-last", action="store_true",
                        help="save a checkpoint after the last step and report its size (then delete it)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    args.save_last = args.save_last or args.lora
    if args.algorithms:  # key=value overrides written after --algorithms land in its list: move them back
        args.overrides += [a for a in args.algorithms if "=" in a]
        args.algorithms = [a for a in args.algorithms if "=" not in a]

    if args.load:
        return print_loaded(args)
    if args.resume and not args.out:
        parser.error("--resume goes on from the runs in --out: name it")
    variants = variants_of(args)
    seeds = args.seeds or [None]
    runs: dict[str, dict[int | None, dict[int, dict]]] = {label: {} for label in variants}
    cfg = None
    skip = finished_runs(args.out, args.steps) if args.resume else set()
    for seed in seeds:
        for label, extra in variants.items():
            if (label, seed) in skip:
                print(f"{label} seed {seed}: already in {args.out}, skipped (--resume)", flush=True)
                continue
            seeded = [f"run.seed={seed}"] if seed is not None else []
            cfg, records, elapsed = run(args.config, label, args, args.overrides + extra + seeded)
            runs[label][seed] = records
            if args.out:  # with the CPU: sittings of one sweep may land on machines of different speed
                with open(args.out, "a") as f:
                    f.write(json.dumps({"variant": label, "seed": seed, "elapsed_s": elapsed, "cpu": cpu_name(),
                                        "records": records}) + "\n")
    if args.resume:  # the tables of the whole sweep, this sitting's runs and the earlier ones
        args.load = [args.out]
        return print_loaded(args)
    print(f"\nmodel={cfg.model.path} prompts/step={cfg.rollout.prompts_per_step} group={cfg.rollout.group_size} "
          f"max_new_tokens={cfg.generation.max_new_tokens} lr={cfg.actor_train.lr} steps={args.steps} "
          f"seeds={seeds} variants={variants} overrides={args.overrides} "
          f"machine={platform.machine()} cpus={os.cpu_count()}")
    if len(seeds) > 1:
        seed_tables(cfg, runs)
        resource_table(runs)
    elif len(variants) == 1:
        curve_table(cfg, next(iter(runs.values()))[seeds[0]])
    else:
        comparison_tables(cfg, {label: by_seed[seeds[0]] for label, by_seed in runs.items()})
        resource_table(runs)


if __name__ == "__main__":
    main()
