"""vLLM generation on this CPU by precision and mode, side by side: fp32 eager (the shipped configs), bf16 eager,
bf16 compiled (enforce_eager false: inductor), interleaved, several repetitions.

    flock /tmp/rlvr-heavy.lock .venv/bin/python bench/vllm_precision.py [--batches 32 64] [--reps 3]

Each engine serves the default model's chat prompts (the shipped math data), n=1 per prompt, T=0.7, up to
--new-tokens tokens; prefix caching on (the engine's default). Prints generated tokens/s median [min, max] and the
ratio to fp32 eager per batch size, and each engine's start-up seconds (an engine that fails to start is named
with its error, not hidden).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.engines import chat_prompts, spread  # noqa: E402

VARIANTS = {"fp32 eager": ("float32", True), "bf16 eager": ("bfloat16", True), "bf16 compiled": ("bfloat16", False)}


async def main(args) -> None:
    from transformers import AutoTokenizer

    from rlvr.backends.vllm_engine import VLLMEngine
    from rlvr.data.types import SamplingParams
    from rlvr.models.default_model import resolve_model_path

    model = resolve_model_path(args.model)
    _, prompts = chat_prompts(AutoTokenizer.from_pretrained(model), max(args.batches))
    sampling = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.7)
    engines, startup, failed = {}, {}, {}
    for name, (dtype, eager) in VARIANTS.items():
        start = time.perf_counter()
        try:
            engines[name] = VLLMEngine(model, dtype=dtype, max_batch_size=max(args.batches), max_model_len=1024,
                                       omp_threads=args.threads, enforce_eager=eager)
            startup[name] = time.perf_counter() - start
        except Exception as err:  # a mode this CPU build cannot run: reported in the table
            failed[name] = f"{type(err).__name__}: {str(err)[:120]}"

    async def timed(engine, batch) -> float:
        start = time.perf_counter()
        results = await asyncio.gather(*(engine.generate(p, 1, sampling) for p in prompts[:batch]))
        return sum(len(g.token_ids) for gens in results for g in gens) / (time.perf_counter() - start)

    try:
        for engine in engines.values():
            await timed(engine, 4)  # warm-up
        rates: dict[tuple[str, int], list[float]] = {}
        for _ in range(args.reps):
            for batch in args.batches:
                for name, engine in engines.items():  # interleaved: the machine's drift hits every variant alike
                    rates.setdefault((name, batch), []).append(await timed(engine, batch))
    finally:
        for engine in engines.values():
            engine.shutdown()
    print(f"\nvLLM generation, {args.model}, {args.threads} threads, up to {args.new_tokens} new tokens, T=0.7, "
          f"{args.reps} reps interleaved")
    header = f"{'batch':>5}  {'variant':<14} {'tokens/s median [min, max]':>28}  {'vs fp32 eager':>13}"
    print(f"{header}  {'start-up s':>10}")
    for batch in args.batches:
        base = statistics.median(rates[("fp32 eager", batch)]) if ("fp32 eager", batch) in rates else None
        for name in VARIANTS:
            if name in failed:
                print(f"{batch:>5}  {name:<14} failed to start: {failed[name]}")
                continue
            r = rates[(name, batch)]
            ratio = f"{statistics.median(r) / base:>12.2f}x" if base else "-"
            print(f"{batch:>5}  {name:<14} {spread(r):>28}  {ratio:>13}  {startup[name]:>10.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    asyncio.run(main(parser.parse_args()))
