"""The update's fixed costs, those that do not depend on the batch: AdamW over the default model's fp32 masters and
their dithered rounding into the bf16 module, each the way rlvr did it before and the way it does now, side by side.

    .venv/bin/python bench/optimizer_step.py [--reps 5] [--params 134515008] [--threads N]

AdamW: torch's default on CPU (a per-tensor loop of elementwise ops) against `fused=True` (one kernel), over one
flat fp32 tensor as ZeRO-2 hands the optimizer its partition. Rounding: the whole-tensor expression (five int32
temporaries of the masters' size) against rlvr/backends/bf16_rounding.py's chunked `dithered_bf16_into`. Each pair
is compared after one step before it is timed (the rounding: the same bits; AdamW: the largest difference between
the two masters over the largest change one step made); prints the median seconds and the ratio.
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

from rlvr.backends.bf16_rounding import LOW_BITS, dither_thresholds, dithered_bf16_into  # noqa: E402


def whole_tensor_dither(master: torch.Tensor, thresholds: torch.Tensor) -> torch.Tensor:
    """rlvr's rounding before the chunked one (the same bits)."""
    bits = master.detach().float().contiguous().view(torch.int32)
    kept = (bits + (thresholds.to(torch.int32) << 8) + 128) & ~LOW_BITS
    return kept.view(torch.float32).to(torch.bfloat16)


def timed(fn, reps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--params", type=int, default=134_515_008, help="SmolLM2-135M-Instruct's parameter count")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)

    rows = []
    start = torch.randn(args.params, generator=g) * 0.05
    masters = {mode: torch.nn.Parameter(start.clone()) for mode in ("default", "fused")}
    grad = torch.randn(args.params, generator=g) * 1e-3
    optimizers = {}
    for mode, p in masters.items():
        p.grad = grad.clone()
        optimizers[mode] = torch.optim.AdamW([p], lr=1e-5, **({"fused": True} if mode == "fused" else {}))
        optimizers[mode].step()
    moved = float((masters["default"].detach() - start).abs().max())
    apart = float((masters["default"] - masters["fused"]).abs().max()) / moved
    adam = {mode: timed(opt.step, args.reps) for mode, opt in optimizers.items()}
    rows.append(("AdamW step", adam["default"], adam["fused"], f"{apart:.1e} of a step"))

    master = masters["default"].detach()
    thresholds = dither_thresholds(master.shape, g)
    low = torch.empty(master.shape, dtype=torch.bfloat16)
    same = "same bits" if torch.equal(whole_tensor_dither(master, thresholds),
                                      dithered_bf16_into(low, master, thresholds)) else "DIFFERENT"
    before = timed(lambda: low.copy_(whole_tensor_dither(master, thresholds)), args.reps)
    now = timed(lambda: dithered_bf16_into(low, master, thresholds), args.reps)
    rows.append(("dithered bf16 rounding", before, now, same))

    print(f"\n{args.params:,} fp32 parameters, {args.threads} threads, median of {args.reps} after a warm-up, "
          f"torch {torch.__version__}")
    print(f"{'what':<24} {'before s':>9} {'now s':>7} {'now / before':>13}  result")
    for what, b, n, result in rows:
        print(f"{what:<24} {b:>9.3f} {n:>7.3f} {n / b:>12.3f}x  {result}")


if __name__ == "__main__":
    main()
