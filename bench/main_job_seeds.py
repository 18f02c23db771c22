"""Does the main job learn, at more than one seed? The README's main command run at several seeds, each rise
against its own validation noise; and, run twice at one seed, how far the same seed's curves agree.

    .venv/bin/python bench/main_job_seeds.py [key=value ...] [--seeds 42 1 2] [--repeat 42]   # overrides first
    .venv/bin/python bench/main_job_seeds.py --load RUN_DIR [RUN_DIR ...]       # the tables of runs already made

Each run is `python -m rlvr.start --config configs/math_code_mix.yaml run.seed=S` in a process of its own, as a
user types it (the overrides are added to every run). From each run's val_samples.jsonl: val_correct at step 0
and at the last validation, per domain and over all (every scored sample, as `val_correct/all/mean`), the rise,
and its standard error as a paired difference over the same validation prompts (d_i = correct_last - correct_0
per prompt, se = sd(d) / sqrt(n)): a rise "counts" when it is larger than that. `--repeat S` runs seed S a second
time and prints, metric by metric, the largest difference between the two runs' records (validation and
training: val_correct, rewards, response lengths, the losses).
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from rlvr.report.run_data import load_run  # noqa: E402

CONFIG = "configs/math_code_mix.yaml"
COMPARED = re.compile(r"^(val_correct/|[^/]+/reward/mean$|[^/]+/response_length/mean$|actor/(pg_loss|entropy|"
                      r"grad_norm|kl)$)")


def run_main_job(seed: int, label: str, overrides: list[str]) -> Path:
    cmd = [sys.executable, "-m", "rlvr.start", "--config", CONFIG, f"run.seed={seed}", f"run.name=seeds-{label}",
           *overrides]
    began = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    found = re.findall(r"^run directory: (.+)$", done.stdout, re.M)
    if done.returncode or not found:
        raise RuntimeError(f"seed {seed} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    print(f"seed {seed} ({label}): {time.perf_counter() - began:.0f}s, {found[-1].strip()}", flush=True)
    return (REPO / found[-1].strip()).resolve()


def per_prompt(run: Path) -> dict[int, dict[tuple[str, str], bool]]:
    """step -> (domain, prompt) -> correct, over the scored validation samples."""
    out: dict[int, dict[tuple[str, str], bool]] = {}
    for r in load_run(run).val_samples:
        if r.get("status", "ok") == "ok":
            out.setdefault(r["step"], {})[(r["domain"], r["prompt"])] = bool(r["correct"])
    return out


def rise(first: dict[tuple[str, str], bool], last: dict[tuple[str, str], bool], domain: str | None):
    """(val_correct at the first validation, at the last, the rise, its paired standard error, n)."""
    keys = sorted(k for k in first.keys() & last.keys() if domain is None or k[0] == domain)
    d = [float(last[k]) - float(first[k]) for k in keys]
    a = statistics.fmean(float(first[k]) for k in keys)
    b = statistics.fmean(float(last[k]) for k in keys)
    se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
    return a, b, b - a, se, len(keys)


def counts(rise_: float, se: float) -> bool:
    """A rise larger than its standard error; equal ones (3/40 against 0.075) differ only in float rounding."""
    return rise_ > se + 1e-9


def rise_table(runs: dict[str, Path]) -> None:
    print("\nval_correct, first and last validation of each run (paired over the same prompts); rise counts when it "
          "exceeds its standard error")
    print(f"{'run':<10} {'domain':<13} {'n':>4} {'step 0':>7} {'last':>7} {'rise':>7} {'se':>7}  counts")
    for label, run in runs.items():
        steps = per_prompt(run)
        first, last = steps[min(steps)], steps[max(steps)]
        domains = sorted({k[0] for k in first})
        for domain in [*domains, None]:
            a, b, r, se, n = rise(first, last, domain)
            name = domain or "all"
            print(f"{label:<10} {name:<13} {n:>4} {a:>7.3f} {b:>7.3f} {r:>+7.3f} {se:>7.3f}  "
                  f"{'yes' if counts(r, se) else 'no'}{'  (step ' + str(max(steps)) + ')' if domain is None else ''}")


def records(run: Path) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for r in load_run(run).records:
        out.setdefault(r["step"], {}).update(r)
    return out


def repeat_table(a: Path, b: Path) -> None:
    ra, rb = records(a), records(b)
    print(f"\nthe same seed twice: largest |difference| over steps, metric by metric ({a.name} vs {b.name})")
    worst: dict[str, tuple[float, int]] = {}
    for step in sorted(ra.keys() & rb.keys()):
        for key in ra[step].keys() & rb[step].keys():
            if COMPARED.match(key) and isinstance(ra[step][key], (int, float)):
                diff = abs(ra[step][key] - rb[step][key])
                if diff >= worst.get(key, (-1.0, 0))[0]:
                    worst[key] = (diff, step)
    for key, (diff, step) in sorted(worst.items()):
        print(f"  {key:<44} {diff:.3g}  (step {step})")
    print("identical" if all(d == 0 for d, _ in worst.values()) else "not identical: the differences above")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2])
    parser.add_argument("--repeat", type=int, default=None, help="run this seed a second time and compare")
    parser.add_argument("--load", nargs="+", help="run directories (runs/seeds-<seed>-<time>) to tabulate")
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    args = parser.parse_args()
    if args.load:
        runs = {Path(p).name.split("-")[1]: Path(p) for p in args.load}
        rise_table(runs)
        if args.repeat is not None:
            repeat_table(runs[str(args.repeat)], runs[f"{args.repeat}again"])
        return
    seeds = args.seeds + ([args.repeat] if args.repeat is not None and args.repeat not in args.seeds else [])
    runs = {str(seed): run_main_job(seed, str(seed), args.overrides) for seed in seeds}
    if args.repeat is not None:
        runs[f"{args.repeat}again"] = run_main_job(args.repeat, f"{args.repeat}again", args.overrides)
    rise_table(runs)
    if args.repeat is not None:
        repeat_table(runs[str(args.repeat)], runs[f"{args.repeat}again"])


if __name__ == "__main__":
    main()
