"""Which attention path makes packed micro-batches pay: forward + backward over the same rows, padded against packed
streams under each attention implementation, with the packed logits checked against the padded ones.

    python scripts/packed_attention_probe.py --device cuda      # on a lent GPU machine (torch + transformers only)
    python scripts/packed_attention_probe.py --device cpu --shape tiny

Why: gpu_check's timing (H100, SmolLM2-135M shape, bf16) found packed streams slower than padded rows (0.566 s
against 0.382 s a step). With no attention mask and restarting position ids, transformers' SDPA path builds a dense
block-diagonal mask over each whole stream, so attention costs (stream length)^2 instead of the sum of each row's
length^2. Candidates: flex attention (a block mask that skips empty blocks) and flash attention's varlen kernel
(torch.nn.attention.varlen, cumulative sequence lengths, no mask at all).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from gpu_check import SHAPES  # noqa: E402  (puts the repository on sys.path too)
from rlvr.data.packing import balanced_bins  # noqa: E402
from rlvr.models import segment_attention  # noqa: E402


def rows(n: int, width: int, vocab: int, seed: int = 3) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (int(torch.randint(8, width + 1, (1,), generator=g)),), generator=g)
            for _ in range(n)]


def padded_pass(model, micro: list[torch.Tensor], device: str) -> torch.Tensor:
    width = max(len(r) for r in micro)
    ids = torch.zeros(len(micro), width, dtype=torch.long)
    mask = torch.zeros(len(micro), width, dtype=torch.long)
    for i, r in enumerate(micro):
        ids[i, : len(r)], mask[i, : len(r)] = r, 1
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False).logits
    return torch.cat([logits[i, : len(r)] for i, r in enumerate(micro)])


def packed_pass(model, micro: list[torch.Tensor], device: str, segments: bool) -> torch.Tensor:
    ids = torch.cat(micro)[None].to(device)
    pos = torch.cat([torch.arange(len(r)) for r in micro])[None].to(device)
    extra = segment_attention.segment_kwargs([len(r) for r in micro], device) if segments else {}
    return model(input_ids=ids, position_ids=pos, use_cache=False, **extra).logits[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("packed_attention_probe: no CUDA device here: skipped")
        return 0
    from transformers import LlamaConfig, LlamaForCausalLM

    varlen = segment_attention.register()  # flash attention's varlen kernel on CUDA in bf16 (rlvr's packed path)
    dtype = torch.bfloat16
    data = rows(64, 512, SHAPES[args.shape]["vocab_size"])
    lengths = [len(r) for r in data]
    real = sum(lengths)
    order = sorted(range(len(data)), key=lambda i: len(data[i]))
    cases = [("padded 16 rows, sdpa", "sdpa", -16), ("padded 64 rows, sdpa", "sdpa", -64),
             ("packed 4096, sdpa", "sdpa", 4096), ("packed 4096, varlen", varlen, 4096),
             ("packed 16384, flex", "flex_attention", 16384),
             ("packed 16384, varlen", varlen, 16384)]
    if args.device == "cpu":
        cases = [c for c in cases if c[1] != varlen]  # flash attention's varlen kernel is CUDA-only
    # no "packed 16384, sdpa": a run with it (and "padded 64 rows") went past 400 s on the H100 with no row back
    # (the table then printed only at the end); its dense 16k x 16k mask per layer is the likely cause
    print(f"forward + backward, {args.shape} shape, bf16, {len(data)} rows, {real} real tokens ({args.device}, "
          f"torch {torch.__version__}):")
    print(f"{'path':<24} {'streams':>7} {'s/step':>8} {'tokens/s':>10} {'vs padded':>10} {'max |logit diff|':>17}")
    results, reference = [], None
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        config = LlamaConfig(**SHAPES[args.shape], tie_word_embeddings=True, pad_token_id=0)
        LlamaForCausalLM(config).save_pretrained(tmp)
        for name, impl, budget in cases:
            try:
                model = LlamaForCausalLM.from_pretrained(tmp, dtype=dtype, attn_implementation=impl).to(args.device)
                micro = ([[data[i] for i in order[k : k - budget]] for k in range(0, len(data), -budget)]
                         if budget < 0 else [[data[i] for i in b] for b in balanced_bins(lengths, budget)])
                order_out = [r for m in micro for r in m]
                seconds, logits = [], None
                for step in range(args.steps + 1):
                    if args.device == "cuda":
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    outs = []
                    for m in micro:
                        out = (padded_pass(model, m, args.device) if budget < 0
                               else packed_pass(model, m, args.device, impl == varlen))
                        out.float().logsumexp(-1).mean().backward()
                        if step == 0:
                            outs.append(out.detach().float().cpu())
                    if args.device == "cuda":
                        torch.cuda.synchronize()
                    seconds.append(time.perf_counter() - t0)
                    if step == 0:
                        split = torch.split(torch.cat(outs), [len(r) for r in order_out])
                        logits = dict(zip(map(id, order_out), split))  # the same row tensors in every case
                diff = float("nan")
                if reference is None:
                    reference = logits
                else:
                    diff = max(float((logits[k] - reference[k]).abs().max()) for k in reference)
                median = sorted(seconds[1:])[len(seconds[1:]) // 2]
                results.append((name, median, real / median, diff, len(micro)))
                # each row as soon as it is measured: a later path that hangs must not take the table with it
                print(f"{name:<24} {len(micro):7d} {median:8.3f} {real / median:10.0f} "
                      f"{median / results[0][1]:9.2f}x {diff:17.3g}", flush=True)
                del model
            except Exception as e:  # noqa: BLE001 - a probe: report the path that fails and go on
                print(f"{name:<24} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
