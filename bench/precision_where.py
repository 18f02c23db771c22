"""Where fp32 must stay when the model runs in bf16: the logprobs of real responses from the default model, with the
whole model in bf16 against the fp32 model, and with single parts kept in fp32.

    .venv/bin/python bench/precision_where.py [--rows 32] [--reps 3]

The responses: the default model's own sampled answers (vLLM-free: HF generate in fp32, T=0.7) to the shipped
math validation prompts, so the tokens are ones the policy gives mass to, as in training. Variants, each against
the fp32 forward (the reference):

  bf16, logsumexp in bf16   everything bf16, log-softmax taken on the bf16 logits (what skipping `.float()` does)
  bf16 (rlvr)               bf16 body and lm_head, logits cast to fp32 before the log-softmax (rlvr.backends.logprobs)
  bf16 body, fp32 lm_head   the last hidden state cast to fp32 and multiplied by an fp32 copy of lm_head

Also printed: the share of the fp32 weights that bf16 holds exactly (the default model is dequantised from a GGUF
file: if its weights are bf16 values already, bf16 weights lose nothing and every difference is the activations').

Printed per variant: mean and max |logp - logp_fp32| over response tokens, the k3 KL estimate against fp32 (the
rollout-correction's `k3_kl`), and the forward's seconds (median over --reps). The value head is a 576 x 1 product:
its bf16 rounding is measured the same way on the critic's value model (random head, as at initialisation).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlvr.backends.logprobs import token_logprobs  # noqa: E402
from rlvr.models.default_model import resolve_model_path  # noqa: E402


def responses(model, tokenizer, rows: int) -> list[tuple[list[int], int]]:
    """(prompt + response ids, prompt length) for `rows` shipped validation prompts, sampled from the fp32 model."""
    lines = (REPO / "data/math/val.jsonl").read_text().splitlines()[:rows]
    out = []
    torch.manual_seed(0)
    for line in lines:
        messages = json.loads(line)["messages"]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
        if not isinstance(ids, torch.Tensor):
            ids = ids["input_ids"]
        with torch.no_grad():
            full = model.generate(ids, do_sample=True, temperature=0.7, max_new_tokens=96,
                                  pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
        out.append((full[0].tolist(), ids.shape[1]))
    return out


def logprobs(model, seqs, lm_head_fp32: torch.Tensor | None = None, bf16_logsumexp: bool = False) -> list[torch.Tensor]:
    out = []
    with torch.no_grad():
        for ids, n_prompt in seqs:
            x = torch.tensor([ids])
            if lm_head_fp32 is not None:
                hidden = model.model(input_ids=x).last_hidden_state.float()
                logits = hidden @ lm_head_fp32.T
            else:
                logits = model(input_ids=x).logits
            targets = x[:, 1:]
            logits = logits[:, :-1]
            if bf16_logsumexp:
                lp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
                lp = lp.float()
            else:
                lp = token_logprobs(logits, targets)
            out.append(lp[0, n_prompt - 1:])
    return out


def compare(reference: list[torch.Tensor], other: list[torch.Tensor]) -> tuple[float, float, float]:
    d = torch.cat([o - r for r, o in zip(reference, other)])
    k3 = (torch.exp(d) - 1 - d).mean()
    return float(d.abs().mean()), float(d.abs().max()), float(k3)


def timed(fn, reps: int):
    times, result = [], None
    for _ in range(reps):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return result, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path)
    fp32 = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    seqs = responses(fp32, tokenizer, args.rows)
    bf16 = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    head32 = fp32.lm_head.weight.detach().float()
    reference, t_ref = timed(lambda: logprobs(fp32, seqs), args.reps)
    variants = {
        "bf16, logsumexp in bf16": lambda: logprobs(bf16, seqs, bf16_logsumexp=True),
        "bf16 (rlvr)": lambda: logprobs(bf16, seqs),
        "bf16 body, fp32 lm_head": lambda: logprobs(bf16, seqs, lm_head_fp32=head32),
    }
    tokens = sum(len(r) for r in reference)
    params = list(fp32.parameters())
    exact = sum(int((p.bfloat16().float() == p).sum()) for p in params) / sum(p.numel() for p in params)
    print(f"\nfp32 weights that bf16 holds exactly: {exact:.4%}")
    print(f"\n{args.rows} sampled responses, {tokens} response tokens; reference: the fp32 model "
          f"({t_ref:.2f} s per forward pass over them)\n")
    print("| variant | mean abs dlogp | max abs dlogp | k3 KL vs fp32 | forward s | vs fp32 time |")
    print("|---|---|---|---|---|---|")
    for name, fn in variants.items():
        other, seconds = timed(fn, args.reps)
        mean, top, k3 = compare(reference, other)
        print(f"| {name} | {mean:.2e} | {top:.2e} | {k3:.2e} | {seconds:.2f} | {seconds / t_ref:.2f}x |")
    # the value head: one 576 -> 1 product on the last hidden state
    torch.manual_seed(0)
    head = torch.nn.Linear(fp32.config.hidden_size, 1)
    with torch.no_grad():
        values32 = [head(fp32.model(input_ids=torch.tensor([ids])).last_hidden_state)[0, :, 0] for ids, _ in seqs]
        h16 = head.to(torch.bfloat16)
        values16 = [h16(bf16.model(input_ids=torch.tensor([ids])).last_hidden_state)[0, :, 0].float()
                    for ids, _ in seqs]
    d = torch.cat([b - a for a, b in zip(values32, values16)])
    scale = torch.cat(values32).abs().mean()
    print(f"\nvalue head (576 -> 1, random as at initialisation) in bf16 vs fp32: mean abs error "
          f"{float(d.abs().mean()):.2e}, max {float(d.abs().max()):.2e}, against mean |value| {float(scale):.2e}")


if __name__ == "__main__":
    main()
