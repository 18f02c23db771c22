"""Generation with LoRA on this CPU build of vLLM: merged weights (what rlvr does: W + scale B A loaded into the
engine after each step) against vLLM's own LoRA adapters (the base model plus a `LoRARequest` per request), one
engine each, the same prompts and sampling, side by side in one run:

    .venv/bin/python bench/vllm_lora.py [--ranks 8] [--prompts 64] [--new-tokens 96] [--reps 3]

Per rank: generated tokens/s of each mode (median over --reps, after a warm-up), and what a new adapter costs
the adapter mode (the first request naming a new adapter id loads it from disk). The adapters are random
(non-zero B, so the LoRA path computes something), put on every projection as `actor_train.lora` does by default.
The weight-update side of the merged mode is measured in the pipeline (`time/model_update`, bench/learning.py
--lora). Model: SmolLM2-135M-Instruct in fp32 (the shipped configs' generation.dtype).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def prompts(tokenizer, n: int) -> list[str]:
    rows = [json.loads(line) for line in (REPO / "data/math/train.jsonl").read_text().splitlines()][:n]
    return [tokenizer.apply_chat_template(r["messages"], tokenize=False, add_generation_prompt=True) for r in rows]


def make_adapter(base: str, rank: int, out: Path) -> Path:
    """A random adapter in peft's format (rlvr's checkpoint format), B drawn non-zero."""
    import torch

    from rlvr.backends.lora import add_lora, save_adapter
    from rlvr.backends.train_strategy import load_causal_lm
    from rlvr.config.trainer import LoraConfig

    torch.manual_seed(rank)
    model = add_lora(load_causal_lm(base), LoraConfig(rank=rank))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.01)
    named = {n: p.detach() for n, p in model.named_parameters()}
    return save_adapter(named, [n for n, p in model.named_parameters() if p.requires_grad], model, out)


def make_merged(base: str, adapter: Path, out: Path) -> Path:
    import shutil

    from safetensors.torch import save_file

    from rlvr.cli.export import merged_base

    out.mkdir(parents=True)
    for f in Path(base).iterdir():
        if f.is_file() and not f.name.endswith(".safetensors"):
            shutil.copy(f, out / f.name)
    save_file({k: v.contiguous() for k, v in merged_base(base, adapter).items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    return out


def engine(model: str, lora_rank: int | None):
    from vllm import LLM

    kwargs = dict(enable_lora=True, max_lora_rank=lora_rank, max_loras=1) if lora_rank else {}
    return LLM(model=model, dtype="float32", seed=0, max_model_len=1024, max_num_seqs=64, enforce_eager=True,
               kv_cache_memory_bytes=1 << 30, **kwargs)


def timed(llm, texts, sampling, lora=None) -> tuple[float, int]:
    start = time.perf_counter()
    outs = llm.generate(texts, sampling, lora_request=lora, use_tqdm=False)
    return time.perf_counter() - start, sum(len(o.outputs[0].token_ids) for o in outs)


def main() -> None:
    parser = argparse.ArgumentParser()
    # rank 32's adapter mode did not finish its repetitions in 15 minutes here (docs/lora.md): ask for it by name
    parser.add_argument("--ranks", type=int, nargs="+", default=[8])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    from transformers import AutoTokenizer
    from vllm import SamplingParams
    from vllm.lora.request import LoRARequest

    from rlvr.models.default_model import ensure_default_model

    base = ensure_default_model()
    texts = prompts(AutoTokenizer.from_pretrained(base), args.prompts)
    # a fixed length (no EOS), so both modes generate the same number of tokens
    sampling = SamplingParams(temperature=0.7, max_tokens=args.new_tokens, ignore_eos=True, seed=0)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-vllm-lora-") as tmp:
        for rank in args.ranks:
            adapter = make_adapter(base, rank, Path(tmp) / f"adapter-r{rank}")
            merged = make_merged(base, adapter, Path(tmp) / f"merged-r{rank}")
            result = {"rank": rank}
            for mode in ("merged", "adapter"):
                llm = engine(str(merged), None) if mode == "merged" else engine(base, rank)
                request = LoRARequest(f"r{rank}", 1, str(adapter)) if mode == "adapter" else None
                first, _ = timed(llm, texts[:4], sampling, request)  # warm-up; loads the adapter
                if mode == "adapter":  # a new adapter id: what each training step's new adapter would cost
                    again = LoRARequest(f"r{rank}-next", 2, str(adapter))
                    new_s, _ = timed(llm, texts[:4], sampling, again)
                    warm_s, _ = timed(llm, texts[:4], sampling, again)
                    result["new_adapter_s"] = new_s - warm_s
                    request = again
                runs = [timed(llm, texts, sampling, request) for _ in range(args.reps)]
                result[mode] = statistics.median(tokens / s for s, tokens in runs)
                del llm
            rows.append(result)
            print(f"rank {rank}: {result}", flush=True)
    print(f"\nmodel={base} fp32 prompts={args.prompts} new_tokens={args.new_tokens} reps={args.reps} "
          f"machine={platform.machine()} cpus={os.cpu_count()}\n")
    print("| rank | merged tok/s | vLLM LoRA tok/s | LoRA / merged | a new adapter's load, s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['rank']} | {r['merged']:.0f} | {r['adapter']:.0f} | {r['adapter'] / r['merged']:.2f} | "
              f"{r['new_adapter_s']:.2f} |")


if __name__ == "__main__":
    main()
