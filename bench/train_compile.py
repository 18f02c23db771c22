"""Does torch.compile speed up the default model's bf16 update on this CPU? One process per mode (eager; each
decoder layer compiled, "regional" compilation, which compiles one layer's code for all 30; the whole model), the
same micro-batches (8 rows of 165-190 tokens, right-padded, lm_head over the last 60 positions, as an update
computes it): the first micro-batch's seconds (compilation included) and the steady seconds per micro-batch.

    .venv/bin/python bench/train_compile.py --modes eager regional
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

SHAPES = [(8, 180), (8, 172), (8, 190), (8, 165), (8, 181), (8, 177), (8, 185), (8, 170)]


def measure(mode: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.models.default_model import ensure_default_model

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(ensure_default_model(), dtype=torch.bfloat16,
                                                 attn_implementation="sdpa").train()
    if mode == "regional":
        for layer in model.model.layers:
            layer.compile(dynamic=True)
    elif mode == "whole":
        model.model.compile(dynamic=True)

    def micro(i: int, rows: int, width: int) -> float:
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, 49_000, (rows, width), generator=g)
        lengths = torch.randint(width // 2, width + 1, (rows,), generator=g)
        lengths[0] = width
        mask = (torch.arange(width)[None] < lengths[:, None]).long()
        start = time.perf_counter()
        logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=width - 60).logits
        logits.float().logsumexp(-1).mean().backward()
        return time.perf_counter() - start

    first = micro(0, *SHAPES[0])
    steady = [micro(i, *shape) for i, shape in enumerate(SHAPES * 2)]
    tokens = sum(rows * width for rows, width in SHAPES * 2)
    return {"mode": mode, "first_s": first, "median_s": statistics.median(steady), "tokens_per_s": tokens / sum(steady)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", nargs="+", default=["eager", "regional"], choices=["eager", "regional", "whole"])
    ap.add_argument("--one", help=argparse.SUPPRESS)  # the child process's mode
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    rows = []
    for mode in args.modes:  # a process each: compiled code and allocator state do not carry over
        out = subprocess.run([sys.executable, __file__, "--one", mode], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = rows[0]["median_s"]
    print("| mode | first micro-batch s (compile included) | steady s per micro-batch | vs first mode | tokens/s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['first_s']:.1f} | {r['median_s']:.2f} | {r['median_s'] / base:.2f}x | "
              f"{r['tokens_per_s']:.0f} |")


if __name__ == "__main__":
    main()
