"""The main job in fp32 against bf16, side by side: the README's main command as typed, each precision in a process
of its own, alternating (fp32, bf16, fp32, bf16, ...) so that the machine's drift hits both alike.

    .venv/bin/python bench/main_job_precision.py [--rounds 1] [key=value ...]

The two configurations, on top of configs/math_code_mix.yaml as shipped (the overrides are added to both):

  fp32   actor_train.bf16_autocast=false generation.dtype=float32 algorithm.rollout_correction.is_level=null
         (the configuration shipped before bf16: no correction, so no old-logprob forward)
  bf16   actor_train.bf16_autocast=true actor_train.bf16_weights=true generation.dtype=bfloat16
         algorithm.rollout_correction.is_level=token (as shipped since 2026-11-26)

Printed per run: the command's wall-clock seconds (start-up, validations and saving included: what a user waits
for) and the median training step (steps 1.., validation excluded, from metrics.jsonl's time/step - time/val);
then per precision the medians over its runs, and bf16 / fp32 for both.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.learning import step_times  # noqa: E402
from bench.main_job_seeds import records, run_main_job  # noqa: E402

PRECISIONS = {
    "fp32": ["actor_train.bf16_autocast=false", "generation.dtype=float32",
             "algorithm.rollout_correction.is_level=null"],
    "bf16": ["actor_train.bf16_autocast=true", "actor_train.bf16_weights=true", "generation.dtype=bfloat16",
             "algorithm.rollout_correction.is_level=token"],
}


def median_step(run: Path) -> float:
    """Median over the training steps after step 0 (warm-up) of time/step - time/val."""
    return statistics.median(step_times(records(run)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="runs of each precision, alternating")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    args = parser.parse_args()

    results: dict[str, list[tuple[float, float]]] = {name: [] for name in PRECISIONS}
    for round_ in range(args.rounds):
        for name, overrides in PRECISIONS.items():
            began = time.perf_counter()
            run = run_main_job(args.seed, f"{name}-{round_}", [*overrides, *args.overrides])
            results[name].append((time.perf_counter() - began, median_step(run)))
            print(f"{name} round {round_}: command {results[name][-1][0]:.0f} s, median step "
                  f"{results[name][-1][1]:.1f} s  ({run})", flush=True)

    print(f"\nthe main job (configs/math_code_mix.yaml, seed {args.seed}), {args.rounds} run(s) of each, alternating")
    print(f"{'precision':<10} {'command s':>10} {'median step s':>14}")
    medians = {name: (statistics.median(c for c, _ in rows), statistics.median(s for _, s in rows))
               for name, rows in results.items()}
    for name, (command, step) in medians.items():
        print(f"{name:<10} {command:>10.0f} {step:>14.1f}")
    print(f"{'bf16/fp32':<10} {medians['bf16'][0] / medians['fp32'][0]:>9.2f}x "
          f"{medians['bf16'][1] / medians['fp32'][1]:>13.2f}x")


if __name__ == "__main__":
    main()
