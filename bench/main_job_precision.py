"""The main job in fp32 against bf16, side by side: the README's main command as typed, each configuration in a
process of its own, alternating (fp32, bf16, ..., fp32, bf16, ...) so that the machine's drift hits all alike.

    .venv/bin/python bench/main_job_precision.py [--rounds 1] [--variants fp32 bf16 ...] [--base fp32] [key=value ...]

The configurations, on top of configs/math_code_mix.yaml as shipped (the overrides are added to every one):

  fp32   actor_train.bf16_autocast=false generation.dtype=float32 algorithm.rollout_correction.is_level=null
         actor_train.max_tokens_per_micro_batch=null (the configuration shipped before bf16: no correction, so no
         old-logprob forward; padded micro-batches of 8 rows)
  bf16   actor_train.bf16_autocast=true actor_train.bf16_weights=true generation.dtype=bfloat16
         algorithm.rollout_correction.is_level=token (as shipped since 2026-11-26)
  bf16-torch     bf16 with the one-process torch strategy instead of DeepSpeed ZeRO-2
  bf16-compiled  bf16 with vLLM compiled (generation.vllm.enforce_eager=false) instead of eager
  shipped        configs/math_code_mix.yaml unchanged (precision `auto`: the host's)
  shipped-padded shipped with padded micro-batches of 8 rows instead of packed ones (`--base shipped` compares)
  shipped-per-row shipped, packed, but each row alone: a group's prompt computed once per sample
                 (actor_train.share_prompt_prefix=false)
  shipped-hf-judge  shipped with the local judge on rlvr's transformers server instead of vLLM's

Printed per run: the command's wall-clock seconds (start-up, validations and saving included: what a user waits
for) and the median training step (steps 1.., validation excluded, from metrics.jsonl's time/step - time/val);
then per variant the medians over its runs, and each variant / fp32 for both.
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

BF16 = ["actor_train.bf16_autocast=true", "actor_train.bf16_weights=true", "generation.dtype=bfloat16",
        "algorithm.rollout_correction.is_level=token"]
VARIANTS = {
    "fp32": ["actor_train.bf16_autocast=false", "generation.dtype=float32",
             "algorithm.rollout_correction.is_level=null", "actor_train.max_tokens_per_micro_batch=null"],
    "bf16": BF16,
    "bf16-torch": [*BF16, "actor_train.strategy=torch"],
    "bf16-compiled": [*BF16, "generation.vllm.enforce_eager=false"],
    "shipped": [],  # the config as shipped: precision `auto` (the host's), rollout correction on
    "shipped-padded": ["actor_train.max_tokens_per_micro_batch=null"],
    "shipped-per-row": ["actor_train.share_prompt_prefix=false"],
    # the judge on rlvr's transformers server (ready in 5 s on the AMX Xeon) instead of vLLM's (26-46 s there)
    "shipped-hf-judge": ["judge_server.prefer_vllm=false"],
    # the judge server in bf16 (its default on CPU is float32), sharing the cores with generation
    "shipped-judge-bf16": ["judge_server.dtype=bfloat16"],
}


def median_step(run: Path) -> float:
    """Median over the training steps after step 0 (warm-up) of time/step - time/val."""
    return statistics.median(step_times(records(run)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="runs of each variant, alternating")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=["fp32", "bf16"],
                        help="--base (the baseline of the ratios) is always run")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--base", choices=list(VARIANTS), default="fp32", help="the variant the ratios are to")
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    args = parser.parse_args()

    names = [args.base, *(v for v in args.variants if v != args.base)]
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        for name in names:
            overrides = VARIANTS[name]
            began = time.perf_counter()
            run = run_main_job(args.seed, f"{name}-{round_}", [*overrides, *args.overrides])
            results[name].append((time.perf_counter() - began, median_step(run)))
            print(f"{name} round {round_}: command {results[name][-1][0]:.0f} s, median step "
                  f"{results[name][-1][1]:.1f} s  ({run})", flush=True)

    print(f"\nthe main job (configs/math_code_mix.yaml, seed {args.seed}), {args.rounds} run(s) of each, alternating")
    print(f"{'variant':<14} {'command s':>10} {'median step s':>14} {'command / base':>15} {'step / base':>12}")
    medians = {name: (statistics.median(c for c, _ in rows), statistics.median(s for _, s in rows))
               for name, rows in results.items()}
    base_command, base_step = medians[args.base]
    for name, (command, step) in medians.items():
        print(f"{name:<14} {command:>10.0f} {step:>14.1f} {command / base_command:>14.2f}x {step / base_step:>11.2f}x")


if __name__ == "__main__":
    main()
