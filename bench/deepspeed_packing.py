"""The main job's trainer, one optimizer step: DeepSpeed ZeRO-2 with bf16 weights (one rank), padded micro-batches
against packed ones, each row alone or a prompt's rows as one unit (actor_train.share_prompt_prefix), interleaved.

    .venv/bin/python bench/deepspeed_packing.py [--reps 3] [--rows 32] [--group-size 4] [--max-tokens 1024]

One engine for all three: the packing settings are read at every step, so the variants swap the strategy's config
between steps (one engine per variant would need one process group each). The batch is bench/precision_packing.py's
(prompts of 40-90 tokens in groups of --group-size rows, responses of 8-96). Prints the median step and the logprob
forward (the old-policy forward's cost) per variant, and each against padded.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("DS_ACCELERATOR", "cpu")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.precision_packing import real_batch  # noqa: E402
from rlvr.algorithms.actor_objective import ObjectiveSettings, actor_objective  # noqa: E402
from rlvr.backends.deepspeed_strategy import DeepSpeedStrategy  # noqa: E402
from rlvr.backends.dist import free_port  # noqa: E402
from rlvr.config.trainer import ActorTrainConfig  # noqa: E402
from rlvr.models.default_model import resolve_model_path  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=1024)
    args = parser.parse_args()
    batch = real_batch(args.rows, group_size=args.group_size)
    padded = ActorTrainConfig(lr=1e-7, micro_batch_size=8, bf16_autocast=True, bf16_weights=True,
                              strategy="deepspeed")
    variants = {"padded": padded,
                "packed per row": padded.model_copy(update={"max_tokens_per_micro_batch": args.max_tokens,
                                                            "share_prompt_prefix": False}),
                "packed shared": padded.model_copy(update={"max_tokens_per_micro_batch": args.max_tokens})}
    s = DeepSpeedStrategy(resolve_model_path("smollm2-135m-instruct"), padded, total_steps=1000, seed=0, rank=0,
                          world_size=1, master_addr="127.0.0.1", master_port=free_port())
    settings = ObjectiveSettings()

    def loss_fn(logp, entropy, micro, n_tokens, n_seqs):
        return actor_objective(logp, entropy, micro.tensors, settings, n_tokens, n_seqs)

    steps: dict[str, list[float]] = {name: [] for name in variants}
    forwards: dict[str, list[float]] = {name: [] for name in variants}
    for rep in range(args.reps + 1):  # the first round warms up
        for name, cfg in variants.items():
            s.cfg = cfg
            began = time.perf_counter()
            s.train_step(batch, loss_fn)
            step = time.perf_counter() - began
            began = time.perf_counter()
            s.forward_logprobs(batch, loss_positions_only=True)
            if rep:
                steps[name].append(step)
                forwards[name].append(time.perf_counter() - began)
    tokens = int(batch["attention_mask"].sum())
    print(f"\nDeepSpeed ZeRO-2, bf16 weights, one rank: {args.rows} rows, {tokens} real tokens, {args.group_size} rows "
          f"a prompt, micro-batches of 8 rows or {args.max_tokens} packed tokens, median of {args.reps} after a "
          "warm-up, interleaved")
    print(f"{'variant':<15} {'step s':>7} {'vs padded':>10} {'logprob forward s':>18} {'vs padded':>10}")
    base_step, base_fwd = statistics.median(steps["padded"]), statistics.median(forwards["padded"])
    for name in variants:
        step, fwd = statistics.median(steps[name]), statistics.median(forwards[name])
        print(f"{name:<15} {step:>7.2f} {step / base_step:>9.2f}x {fwd:>18.2f} {fwd / base_fwd:>9.2f}x")


if __name__ == "__main__":
    main()
