"""Time to accuracy: rlvr against TRL's GRPOTrainer, the same work under the same wall-clock budget.

    .venv/bin/python bench/race.py [--budget-min 20] [--marks 10] [--seeds 1 2 3] [--out race.jsonl] [key=value ...]
    .venv/bin/python bench/race.py --load race.jsonl [more.jsonl ...]      # the tables of runs already made
    .venv/bin/python bench/race.py --seeds 1 2 3 --out race.jsonl --resume  # only the seeds race.jsonl lacks

The same for both, taken from one loaded rlvr config (configs/math.yaml and the key=value overrides), so they
cannot drift apart: the model (SmolLM2-135M-Instruct), the shipped math train data (each framework shuffles it
with the run's seed), prompts per step, group size, sampling temperature, maximum response length, learning rate
(constant), the precision, one optimizer step per rollout, no KL term, and the reward: rlvr's MathRuleRewardWorker
(math-verify, last-number fallback), which TRL calls in its own process through the same `score`. Each keeps its
own loss defaults where the workload does not fix them (both are token-level and clip at 0.2: rlvr's `grpo`
preset, TRL's `loss_type="dapo"`). TRL generates with transformers' `generate` (its CPU default; `--trl-vllm`
tries its colocated vLLM mode with this CPU build of vLLM). The precision is the config's: bf16 as shipped since
2026-11-26 (rlvr: bf16 weights over fp32 masters; TRL: `bf16=True`, the HF Trainer's autocast over fp32 weights,
its only bf16 training mode), fp32 with `actor_train.bf16_autocast=false generation.dtype=float32` (how the race
in docs/race.md ran).

The clock starts after the imports, before a framework builds anything (rlvr: Ray, the vLLM engine, the workers;
TRL: loading the model), so start-up counts as a user waits for it. At every mark (budget x k / marks) the first
step that ends after it saves the policy's weights; the time spent saving is taken off the clock, and the run
stops at the last mark. The saved weights and the base model are then scored by one evaluator for both
(`python -m rlvr.eval`: vLLM, greedy, configs/math.yaml's validation split, 64 prompts), outside every budget; a
run's records go to --out when its seed's evaluation ends, so a bench cut short keeps what it finished, and
`--resume` runs only the seeds --out lacks (a whole race is ~2.5 hours here: it can take several sittings; each
record names the CPU it ran on, since the wall-clock compares only between runs on the same kind).

Tables: val_correct/all against the marks' wall-clock (mean +- standard error over seeds), the time each run
first reaches base + 0.10 and base + 0.20 (at the resolution of the marks: the elapsed time of the first saved
weights at or above; "-" when never), val_correct at the end of the budget, and the ratios rlvr / TRL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from learning import cpu_name, mean_se, read_rows  # noqa: E402

CONFIG = "configs/math.yaml"
THRESHOLDS = (0.10, 0.20)


class BudgetSpent(Exception):
    """The last mark is saved: the run ends here."""


class RaceClock:
    """Wall-clock since the start, less the time spent saving marks; says when the next mark is due."""

    def __init__(self, budget_s: float, marks: int, out: Path, name: str):
        self.budget_s, self.marks, self.out, self.name = budget_s, marks, out, name
        self.start, self.excluded, self.saved = time.perf_counter(), 0.0, []

    def elapsed(self) -> float:
        return time.perf_counter() - self.start - self.excluded

    def due(self) -> bool:
        return self.elapsed() >= self.budget_s * (len(self.saved) + 1) / self.marks

    @contextmanager
    def saving(self, step: int):
        """Around saving the weights of mark k: yields its directory, records it, keeps the time off the clock."""
        k, elapsed, began = len(self.saved) + 1, self.elapsed(), time.perf_counter()
        directory = self.out / f"{self.name}-m{k:02d}"
        yield directory
        self.excluded += time.perf_counter() - began
        self.saved.append({"mark": k, "mark_s": self.budget_s * k / self.marks, "elapsed_s": elapsed,
                           "step": step, "dir": str(directory), "save_s": time.perf_counter() - began})
        (self.out / f"{self.name}.json").write_text(json.dumps(self.saved))
        if k == self.marks:
            raise BudgetSpent


# ------------------------------------------------------------------------------------------------ one rlvr run
def race_config(overrides: list[str]):
    from rlvr.config.load import load_config

    return load_config(CONFIG, overrides)


def run_rlvr(args, out: Path, name: str) -> None:
    from rlvr.cli.export import export
    from rlvr.pipeline.rlvr_pipeline import RLVRPipeline

    cfg = race_config([f"run.seed={args.seed}", "run.max_steps=100000", "run.eval_every=0", "run.save_every=1",
                       "run.keep_checkpoints=1", f"run.name=race-{name}", f"run.output_dir={out / 'runs'}",
                       "trackers.wandb=false", "trackers.tensorboard=false", *args.overrides])
    clock = RaceClock(args.budget_min * 60, args.marks, out, name)  # after the imports, as for TRL

    class RacePipeline(RLVRPipeline):
        """Saves only at the marks: a checkpoint, exported as a plain model directory, then deleted."""

        def save(self):
            if not clock.due():
                return None
            with clock.saving(self.step) as directory:
                checkpoint = super().save()
                export(checkpoint, directory)
                shutil.rmtree(checkpoint)

    pipeline = RacePipeline(cfg)
    try:
        pipeline.run()
    except BudgetSpent:
        pass
    finally:
        pipeline.close()


# ------------------------------------------------------------------------------------------------- one TRL run
def run_trl(args, out: Path, name: str) -> None:
    from engines import ensure_trl

    ensure_trl()  # before transformers is imported: it records at import whether accelerate exists
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlvr.models.default_model import resolve_model_path
    from rlvr.workers.rewards.math_rule import MathRuleRewardWorker

    cfg = race_config(args.overrides)
    clock = RaceClock(args.budget_min * 60, args.marks, out, name)  # after the imports, as for rlvr
    domain = next(iter(cfg.domains))
    reward = MathRuleRewardWorker(domain, **cfg.domains[domain].reward.args)  # the same worker rlvr's domains run
    rows = [json.loads(line) for line in (REPO / cfg.data.train_files[0]).read_text().splitlines()]
    data = Dataset.from_list([{"prompt": r["messages"], "ground_truth": r["ground_truth"]} for r in rows])

    failed = []

    def math_rule(completions, ground_truth, **_):
        # evaluate(), as rlvr's scheduler calls it: a verifier that raises (a ZeroDivisionError inside math-verify on
        # one completion stopped TRL's seed 3 when this called score()) is a failed sample, not a crash. TRL
        # has no mask: None is its documented "no reward for this sample" (NaN, summed as 0); rlvr masks it.
        async def scores():
            return await asyncio.gather(*(reward.evaluate(SimpleNamespace(
                response_text=c[-1]["content"] if isinstance(c, list) else c,
                prompt=SimpleNamespace(ground_truth=gt))) for c, gt in zip(completions, ground_truth)))
        results = asyncio.run(scores())
        failed.extend(r.info for r in results if r.status != "ok")
        return [r.reward if r.status == "ok" else None for r in results]

    trainer = None

    class Marks(TrainerCallback):
        def on_step_end(self, _args, state, control, **_):
            if clock.due():
                try:
                    with clock.saving(state.global_step) as directory:
                        trainer.save_model(str(directory))
                except BudgetSpent:
                    control.should_training_stop = True

    group, prompts = cfg.rollout.group_size, cfg.rollout.prompts_per_step
    config = GRPOConfig(
        output_dir=str(out / f"trl-work-{name}"), use_cpu=True, bf16=cfg.actor_train.bf16_autocast, max_steps=100000,
        seed=args.seed,
        per_device_train_batch_size=prompts * group, gradient_accumulation_steps=1, num_generations=group,
        max_completion_length=cfg.generation.max_new_tokens, temperature=cfg.generation.temperature,
        learning_rate=cfg.actor_train.lr, lr_scheduler_type="constant", beta=0.0, logging_steps=1,
        save_strategy="no", report_to=[], dataloader_num_workers=0, use_vllm=args.trl_vllm,
        **({"vllm_mode": "colocate"} if args.trl_vllm else {}))
    torch.manual_seed(args.seed)
    model = resolve_model_path(cfg.model.path, cfg.model.cache_dir)
    trainer = GRPOTrainer(model=model, reward_funcs=math_rule, args=config, train_dataset=data, callbacks=[Marks()])
    try:
        trainer.train()
    finally:
        reward.close()
        if failed:  # counted, never silently lost
            print(f"{name}: {len(failed)} completions without a reward (failed verification); first: {failed[0]}",
                  flush=True)


# ------------------------------------------------------------------------------------------------- evaluation
def evaluate(models: list[Path], overrides: list[str]) -> dict[str, dict[str, float]]:
    """val_correct per domain of each model directory, by one `python -m rlvr.eval` for all of them."""
    cmd = [sys.executable, "-m", "rlvr.eval", "--config", CONFIG, *[a for m in models for a in ("--model", str(m))],
           "trackers.wandb=false", "trackers.tensorboard=false",
           *[o for o in overrides if o.startswith(("validation.", "data.val"))]]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    found = re.search(r"^eval directory: (.+)$", done.stdout, re.M)
    if done.returncode or not found:
        raise RuntimeError(f"rlvr.eval failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    from rlvr.report.run_data import load_run

    scores = {}
    for model in models:
        records = load_run(Path(found[1]) / model.name).records
        scores[model.name] = {k: v for r in records for k, v in r.items() if k.startswith("val_correct/")}
    shutil.rmtree(found[1], ignore_errors=True)
    return scores


def race_seed(args, seed: int, work: Path, with_base: bool) -> list[dict]:
    """Both frameworks' runs of one seed, each in a process of its own, then one evaluation of all they saved."""
    saved = {}
    for framework in args.frameworks:
        name = f"{framework}-s{seed}"
        cmd = [sys.executable, __file__, "--one", framework, "--seed", str(seed), "--work", str(work),
               "--budget-min", str(args.budget_min), "--marks", str(args.marks), *(["--trl-vllm"] * args.trl_vllm),
               *args.overrides]
        began = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=REPO)
        saved[framework] = json.loads((work / f"{name}.json").read_text())
        print(f"{name}: {len(saved[framework])} marks, {time.perf_counter() - began:.0f}s", flush=True)
    models = [Path(m["dir"]) for marks in saved.values() for m in marks]
    if with_base:
        from rlvr.models.default_model import resolve_model_path

        cfg = race_config(args.overrides)
        base = work / "base"
        if not base.exists():
            base.symlink_to(resolve_model_path(cfg.model.path, cfg.model.cache_dir))
        models.insert(0, base)
    began = time.perf_counter()
    scores = evaluate(models, args.overrides)
    print(f"scored {len(models)} models in {time.perf_counter() - began:.0f}s", flush=True)
    cpu = cpu_name()
    records = ([{"framework": "base", "seed": seed, "mark": 0, "elapsed_s": 0.0, "cpu": cpu, **scores["base"]}]
               if with_base else [])
    for framework, marks in saved.items():
        for m in marks:
            records.append({"framework": labelled(framework, args.label), "seed": seed, "cpu": cpu, **m,
                            **scores[Path(m["dir"]).name]})
            shutil.rmtree(m["dir"], ignore_errors=True)
    return records


def labelled(framework: str, label: str | None) -> str:
    """The name a run's records carry: the framework, and the variant's label when the run is one point of a sweep
    (`--label lr2e-6`), so records of several variants load side by side and `--resume` tells them apart."""
    return f"{framework} {label}" if label else framework


def finished_seeds(records: list[dict], frameworks: list[str], budget_s: float, marks: int) -> set[int]:
    """Seeds whose race `records` hold whole for every framework: its last mark saved at the same budget and number
    of marks (a race of another length is another race, so it does not count)."""
    last = {(r["framework"], r["seed"]) for r in records
            if r["framework"] != "base" and r["mark"] == marks and abs(r["mark_s"] - budget_s) < 1e-6}
    seeds = {r["seed"] for r in records}
    return {s for s in seeds if all((f, s) in last for f in frameworks)}


# ------------------------------------------------------------------------------------------------------ tables
def fmt(values: list[float], digits: int = 3) -> str:
    if not values:
        return "-"
    mean, se = mean_se(values)
    return f"{mean:.{digits}f}" + (f" +- {se:.{digits}f}" if len(values) > 1 else "")


def time_to(marks: list[dict], target: float) -> float | None:
    hits = [m["elapsed_s"] for m in sorted(marks, key=lambda m: m["mark"]) if m["val_correct/all/mean"] >= target]
    return hits[0] if hits else None


def tables(records: list[dict]) -> None:
    key = "val_correct/all/mean"
    base = statistics.fmean(r[key] for r in records if r["framework"] == "base")
    runs: dict[str, dict[int, list[dict]]] = {}
    for r in records:
        if r["framework"] != "base":
            runs.setdefault(r["framework"], {}).setdefault(r["seed"], []).append(r)
    frameworks = list(runs)
    n_marks = max(m["mark"] for f in runs.values() for marks in f.values() for m in marks)
    cpus = sorted({r.get("cpu", "unrecorded") for r in records})
    print(f"\nval_correct/all (held-out validation, greedy) at wall-clock marks; base model {base:.3f}; "
          f"mean +- s.e. over seeds; CPUs: {', '.join(cpus)}")
    print(f"{'mark':>5} {'min':>6} " + " ".join(f"{f:>24}" for f in frameworks))
    for k in range(1, n_marks + 1):
        cells, mark_s = [], None
        for f in frameworks:
            at = [m for marks in runs[f].values() for m in marks if m["mark"] == k]
            mark_s = at[0]["mark_s"] if at else mark_s
            cells.append(f"{fmt([m[key] for m in at]):>15} (step {fmt([m['step'] for m in at], 0).split()[0]:>3})")
        print(f"{k:>5} {mark_s / 60 if mark_s else 0:>6.1f} " + " ".join(f"{c:>24}" for c in cells))
    print(f"\n{'':<26}" + " ".join(f"{f:>18}" for f in frameworks) + f" {'ratio':>8}")
    for delta in THRESHOLDS:
        cells, medians = [], []
        for f in frameworks:
            times = [time_to(marks, base + delta) for marks in runs[f].values()]
            got = [t / 60 for t in times if t is not None]
            cells.append((f"{statistics.median(got):.2f}" if got else "-") + f" ({len(got)}/{len(times)} seeds)")
            medians.append(statistics.median(got) if got and len(got) == len(times) else None)
        ratio = f"{medians[0] / medians[1]:.2f}x" if len(medians) == 2 and None not in medians else "-"
        print(f"{f'min to base + {delta:.2f}':<26}" + " ".join(f"{c:>18}" for c in cells) + f" {ratio:>8}")
    finals = {f: [max(marks, key=lambda m: m["mark"])[key] for marks in runs[f].values()] for f in frameworks}
    print(f"{'val_correct at budget end':<26}" + " ".join(f"{fmt(finals[f]):>18}" for f in frameworks))
    print("times: median over seeds of each run's elapsed minutes (start-up included, saving excluded) at its first "
          "saved weights at or above the target, the ratio only when every seed got there (first framework / "
          "second); val_correct: mean +- standard error over seeds")
    per_seed(runs, base)


def per_seed(runs: dict[str, dict[int, list[dict]]], base: float) -> None:
    """Each seed's curve, steps and time to base + 0.10 beside its own ratio: with few seeds the spread between
    seeds (one seed's ratio can be a tenth of another's) says more than the median does."""
    key, delta = "val_correct/all/mean", THRESHOLDS[0]
    print(f"\nper seed: val_correct/all at each mark | steps | minutes to base + {delta:.2f} (ratio within the seed)")
    frameworks = list(runs)
    for seed in sorted({s for f in runs.values() for s in f}):
        times = {}
        for f in frameworks:
            marks = sorted(runs[f].get(seed, []), key=lambda m: m["mark"])
            if not marks:
                continue
            hit = time_to(marks, base + delta)
            times[f] = hit
            curve = " ".join(f"{m[key]:.3f}" for m in marks)
            print(f"seed {seed:>3} {f:>6}  {curve} | {marks[-1]['step']:>3} | "
                  + (f"{hit / 60:.2f}" if hit is not None else "-"))
        if len(frameworks) == 2 and all(times.get(f) for f in frameworks):
            print(f"seed {seed:>3} {'ratio':>6}  {times[frameworks[0]] / times[frameworks[1]]:.2f}x "
                  f"({frameworks[0]} / {frameworks[1]})")


def plot(records: list[dict], path: Path) -> None:
    """val_correct/all against elapsed minutes, one line per framework (mean over seeds at each mark, standard error
    as bars), the base model at 0 and the two targets dashed: the report's style (rlvr/report/plots.py)."""
    from rlvr.report.plots import COLORS, MARKERS, plt

    key = "val_correct/all/mean"
    base = statistics.fmean(r[key] for r in records if r["framework"] == "base")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    frameworks = list(dict.fromkeys(r["framework"] for r in records if r["framework"] != "base"))
    for i, f in enumerate(frameworks):
        marks = sorted({r["mark"] for r in records if r["framework"] == f})
        xs, ys, es = [0.0], [base], [0.0]
        for k in marks:
            at = [r for r in records if r["framework"] == f and r["mark"] == k]
            mean, se = mean_se([r[key] for r in at])
            xs.append(statistics.fmean(r["elapsed_s"] for r in at) / 60)
            ys.append(mean)
            es.append(se)
        ax.errorbar(xs, ys, yerr=es, marker=MARKERS[i], color=COLORS[i], capsize=3, label=f)
    for delta in THRESHOLDS:
        ax.axhline(base + delta, ls="--", color="grey", alpha=0.6)
        ax.text(0, base + delta, f" base + {delta:.2f}", va="bottom", fontsize=8, color="grey")
    seeds = len({r["seed"] for r in records if r["framework"] != "base"})
    ax.set(title=f"time to accuracy: val_correct/all, mean +- s.e. over {seeds} seeds", xlabel="wall-clock minutes "
           "(start-up included, evaluation and saving excluded)", ylabel="val_correct/all", ylim=(-0.05, 1.05))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"plot: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget-min", type=float, default=20.0)
    parser.add_argument("--marks", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--frameworks", nargs="+", default=["rlvr", "trl"], choices=["rlvr", "trl"])
    parser.add_argument("--trl-vllm", action="store_true", help="TRL generates with vLLM (colocate mode)")
    parser.add_argument("--out", default="race.jsonl")
    parser.add_argument("--resume", action="store_true", help="run only the seeds --out lacks (same budget and marks)")
    parser.add_argument("--load", nargs="+", help="print the tables of these records and stop")
    parser.add_argument("--plot", default=None, help="also draw val_correct against wall-clock into this PNG")
    parser.add_argument("--label", default=None, help="name the records' frameworks as variants of a sweep")
    parser.add_argument("--work", default=None, help="where runs save their marks (default: .cache/race)")
    parser.add_argument("--one", choices=["rlvr", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="key=value overrides of configs/math.yaml, for both")
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.load:
        records = read_rows(args.load)
        tables(records)
        if args.plot:
            plot(records, Path(args.plot))
        return
    work = Path(args.work or REPO / ".cache" / "race").resolve()
    work.mkdir(parents=True, exist_ok=True)
    if args.one:
        (run_rlvr if args.one == "rlvr" else run_trl)(args, work, f"{args.one}-s{args.seed}")
        return
    records = []
    if args.resume and Path(args.out).exists():
        records = read_rows([args.out])
    done = finished_seeds(records, [labelled(f, args.label) for f in args.frameworks], args.budget_min * 60, args.marks)
    for seed in args.seeds:
        if seed in done:
            print(f"seed {seed}: already in {args.out}, skipped (--resume)", flush=True)
            continue
        with_base = not any(r["framework"] == "base" for r in records)
        new = race_seed(args, seed, work, with_base=with_base)
        with open(args.out, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in new)
        records += new
        tables(records)
        if args.plot:
            plot(records, Path(args.plot))
    if records and done >= set(args.seeds):  # every seed was there already: the tables of what --out holds
        tables(records)
        if args.plot:
            plot(records, Path(args.plot))


if __name__ == "__main__":
    main()
