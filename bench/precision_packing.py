"""Training-side precision and packing on the default model: one optimizer step of the torch strategy over a batch
with the length spread of a real step, side by side, interleaved, several repetitions.

    flock /tmp/rlvr-heavy.lock .venv/bin/python bench/precision_packing.py [--reps 5] [--rows 32] [--group-size 4]

Variants: fp32; bf16 autocast over fp32 weights; bf16 weights with fp32 masters; each padded (micro-batches of 8
rows, trimmed to their longest) and packed (one stream per micro-batch, `--max-tokens` tokens, each row attending to
itself: rlvr/models/segment_attention.py); "packed dense" is the packed path through plain SDPA, one L x L mask over
the whole stream, as rlvr packed before; "packed shared" packs the rows of one prompt as one unit, the prompt once
(actor_train.share_prompt_prefix; the other packed variants pack each row alone). The batch: prompts of 40-90
tokens, responses of 8-96 (the shipped configs' max_new_tokens), loss on the responses; with --group-size G, each
prompt in G consecutive rows, as a GRPO step has them (the default 1: every row its own prompt). Prints the rows'
real tokens per second (a shared prompt counted once per row, as the padded path computes it; pad not counted)
median [min, max], the ratio to fp32 padded, each variant's padded-token share and the tokens it computes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.engines import spread  # noqa: E402
from rlvr.algorithms.actor_objective import ObjectiveSettings, actor_objective  # noqa: E402
from rlvr.backends.torch_strategy import TorchStrategy  # noqa: E402
from rlvr.config.trainer import ActorTrainConfig  # noqa: E402
from rlvr.data.batch import TrainBatch  # noqa: E402
from rlvr.data.packing import unit_tokens  # noqa: E402
from rlvr.models.default_model import resolve_model_path  # noqa: E402

VARIANTS = {  # name: (bf16_autocast, bf16_weights, packed); packed "dense": SDPA over the stream with its L x L mask;
    # "shared": a prompt's rows packed as one unit
    "fp32 padded": (False, False, False), "fp32 packed": (False, False, True),
    "fp32 packed dense": (False, False, "dense"), "fp32 packed shared": (False, False, "shared"),
    "autocast padded": (True, False, False), "autocast packed": (True, False, True),
    "bf16 padded": (True, True, False), "bf16 packed": (True, True, True), "bf16 packed dense": (True, True, "dense"),
    "bf16 packed shared": (True, True, "shared"),
}


def real_batch(rows: int, seed: int = 0, group_size: int = 1) -> TrainBatch:
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(40, 91, (rows,), generator=g)
    prompts = prompts[torch.arange(rows) // group_size * group_size]  # a group's rows: its first row's prompt
    responses = torch.randint(8, 97, (rows,), generator=g)
    width = int((prompts + responses).max())
    ids = torch.zeros(rows, width, dtype=torch.long)
    att = torch.zeros_like(ids)
    mask = torch.zeros(rows, width - 1)
    for b in range(rows):
        p, r = int(prompts[b]), int(responses[b])
        ids[b, : p + r] = torch.randint(100, 20000, (p + r,), generator=g)
        if b % group_size:
            ids[b, :p] = ids[b - b % group_size, :p]
        att[b, : p + r] = 1
        mask[b, p - 1 : p + r - 1] = 1.0
    adv = torch.randn(rows, 1, generator=g) * mask
    return TrainBatch({"input_ids": ids, "attention_mask": att, "loss_mask": mask, "advantages": adv})


def computed_tokens(strategy: TorchStrategy, batch: TrainBatch) -> tuple[int, float]:
    """The tokens this strategy's micro-batches compute, and the pad share of them."""
    micros = [m for m, _ in strategy._shard(batch)]
    if not strategy.packs:
        computed = sum(m["input_ids"].numel() for m in micros)
        return computed, 1.0 - int(batch["attention_mask"].sum()) / computed
    return sum(unit_tokens(u, lengths, prefixes) for m in micros
               for lengths, prefixes, units in [strategy._units(m)] for u in units), 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--group-size", type=int, default=1, help="rows per prompt (a GRPO group)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), help="a subset (fp32 padded always runs: "
                        "the ratios are to it); e.g. fp32 alone on a CPU without native bf16")
    args = parser.parse_args()
    if args.variants and "fp32 padded" not in args.variants:
        args.variants.insert(0, "fp32 padded")
    model = resolve_model_path(args.model)
    batch = real_batch(args.rows, group_size=args.group_size)
    settings = ObjectiveSettings()

    def loss_fn(logp, entropy, micro, n_tokens, n_seqs):
        return actor_objective(logp, entropy, micro.tensors, settings, n_tokens, n_seqs)

    strategies = {}
    for name, (autocast, bf16_weights, packed) in VARIANTS.items():
        if args.variants and name not in args.variants:
            continue
        cfg = ActorTrainConfig(lr=1e-7, micro_batch_size=8, bf16_autocast=autocast, bf16_weights=bf16_weights,
                               max_tokens_per_micro_batch=args.max_tokens if packed else None,
                               share_prompt_prefix=packed == "shared", torch_threads=args.threads)
        strategies[name] = TorchStrategy(model, cfg, total_steps=1000, seed=0)
        if packed == "dense":  # the packed path before rlvr/models/segment_attention.py: one mask over the stream
            strategies[name].model.set_attn_implementation("sdpa")
        strategies[name].train_step(batch, loss_fn)  # warm-up
    tokens = int(batch["attention_mask"].sum())
    rates: dict[str, list[float]] = {name: [] for name in strategies}
    for _ in range(args.reps):  # interleaved: the machine's drift falls on every variant alike
        for name, s in strategies.items():
            start = time.perf_counter()
            s.train_step(batch, loss_fn)
            rates[name].append(tokens / (time.perf_counter() - start))
    print(f"\none optimizer step, torch strategy, {args.model}: {args.rows} rows, {tokens} real tokens (prompts "
          f"40-90, responses 8-96, {args.group_size} rows a prompt), micro-batches of 8 rows or {args.max_tokens} "
          f"packed tokens, {args.threads} threads, {args.reps} reps interleaved, torch {torch.__version__}")
    base = statistics.median(rates["fp32 padded"])
    print(f"{'variant':<18} {'tokens/s median [min, max]':>28} {'vs fp32 padded':>15} {'pad share':>10} "
          f"{'computed':>9}")
    for name, r in rates.items():
        computed, pad = computed_tokens(strategies[name], batch)
        print(f"{name:<18} {spread(r, '.0f'):>28} {statistics.median(r) / base:>14.2f}x {pad:>9.1%} {computed:>9}")


if __name__ == "__main__":
    main()
