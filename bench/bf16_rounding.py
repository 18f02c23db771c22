"""How far the policy moves per optimizer step with bf16 weights, rounded to nearest or dithered, against fp32.

    .venv/bin/python bench/bf16_rounding.py [--steps 10] [--lr 1e-5] [--rows 16]

The workload is GRPO's in miniature, on the default model and the torch strategy: `--rows` shipped training
prompts, each followed by a right answer ("The answer is \\boxed{<ground truth>}.", advantage +1) or a wrong one
(the ground truth + 1, advantage -1), alternating; token-mean loss, one optimizer step per call, the shipped
configs' AdamW settings. After every step it measures, with the trainer's own forward, the mean response logprob of
the right and of the wrong answers, and prints their movement since step 0 per variant:

  fp32              fp32 weights and compute (the reference)
  bf16, nearest     bf16 module, fp32 masters rounded to nearest into it (DeepSpeed's and PyTorch's cast)
  bf16, dithered    bf16 module, fp32 masters rounded with a fixed random threshold per weight (rlvr's default,
                    rlvr/backends/bf16_rounding.py)

and the movement of each bf16 variant as a share of fp32's (the margin: right - wrong answers' logprob). The
default model's weights are exact bf16 values, so round-to-nearest starts every weight mid-interval: its module
stays frozen until the updates cross half a bf16 step. A benchmark, not a test: the numbers are reported as they
come (tests/unit/test_bf16_rounding.py and tests/unit/test_torch_bf16_weights.py hold the properties).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VARIANTS = {  # name: (bf16 weights, rounding)
    "fp32": (False, "dithered"),
    "bf16, nearest": (True, "nearest"),
    "bf16, dithered": (True, "dithered"),
}


def make_batch(tokenizer, rows: int):
    """Prompt + answer rows (right padding), the answer tokens in the loss, advantage +1 / -1 alternating."""
    from rlvr.data.batch import TrainBatch

    lines = (REPO / "data/math/train.jsonl").read_text().splitlines()[:rows]
    seqs, starts = [], []
    for i, line in enumerate(lines):
        row = json.loads(line)
        answer = row["ground_truth"] if i % 2 == 0 else str(int(row["ground_truth"]) + 1)
        prompt = tokenizer.apply_chat_template(row["messages"], add_generation_prompt=True, tokenize=False)
        ids = tokenizer(prompt + f"The answer is \\boxed{{{answer}}}.", add_special_tokens=False)["input_ids"]
        seqs.append(ids)
        starts.append(len(tokenizer(prompt, add_special_tokens=False)["input_ids"]))
    width = max(map(len, seqs))
    input_ids = torch.full((rows, width), tokenizer.pad_token_id or 0, dtype=torch.long)
    attention_mask = torch.zeros((rows, width), dtype=torch.long)
    loss_mask = torch.zeros((rows, width - 1))
    for b, (ids, start) in enumerate(zip(seqs, starts)):
        input_ids[b, :len(ids)] = torch.tensor(ids)
        attention_mask[b, :len(ids)] = 1
        loss_mask[b, start - 1:len(ids) - 1] = 1.0
    sign = torch.tensor([1.0 if b % 2 == 0 else -1.0 for b in range(rows)])[:, None]
    return TrainBatch({"input_ids": input_ids, "attention_mask": attention_mask, "loss_mask": loss_mask,
                       "advantages": sign * loss_mask})


def mean_logprobs(strategy, batch) -> tuple[float, float]:
    """(right answers, wrong answers): mean over each row's answer tokens, then over rows."""
    logp = strategy.forward_logprobs(batch)
    mask = batch["loss_mask"]
    per_row = (logp * mask).sum(1) / mask.sum(1)
    return float(per_row[0::2].mean()), float(per_row[1::2].mean())


def run(model_path: str, batch, bf16: bool, rounding: str, steps: int, lr: float) -> tuple[list, float]:
    from rlvr.algorithms.actor_objective import ObjectiveSettings, actor_objective
    from rlvr.backends.torch_strategy import TorchStrategy
    from rlvr.config.trainer import ActorTrainConfig

    cfg = ActorTrainConfig(lr=lr, micro_batch_size=8, bf16_autocast=bf16, bf16_weights=bf16, bf16_rounding=rounding)
    strategy = TorchStrategy(model_path, cfg, total_steps=steps, seed=0)
    settings = ObjectiveSettings(loss_agg_mode="token-mean", max_response_len=batch["loss_mask"].shape[1])
    right0, wrong0 = mean_logprobs(strategy, batch)
    moves, seconds = [], 0.0
    for _ in range(steps):
        start = time.perf_counter()
        strategy.train_step(batch, lambda lp, ent, mb, nt, ns: actor_objective(lp, ent, mb.tensors, settings, nt, ns))
        seconds += time.perf_counter() - start
        right, wrong = mean_logprobs(strategy, batch)
        moves.append((right - right0, wrong - wrong0))
    return moves, seconds / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--rows", type=int, default=16)
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from rlvr.models.default_model import resolve_model_path

    model_path = resolve_model_path("smollm2-135m-instruct")
    batch = make_batch(AutoTokenizer.from_pretrained(model_path), args.rows)
    results = {name: run(model_path, batch, bf16, rounding, args.steps, args.lr)
               for name, (bf16, rounding) in VARIANTS.items()}

    print(f"\nmean answer logprob since step 0 (right / wrong answers), {args.rows} rows, lr {args.lr:g}, "
          f"torch {torch.__version__}")
    print(f"{'step':>4} " + " ".join(f"{name:>22}" for name in VARIANTS))
    for step in range(args.steps):
        cells = [f"{results[n][0][step][0]:+.3f} / {results[n][0][step][1]:+.3f}" for n in VARIANTS]
        print(f"{step + 1:>4} " + " ".join(f"{c:>22}" for c in cells))
    print("\nmargin moved (right - wrong) as a share of fp32's, and seconds per optimizer step")
    margin = {n: [r - w for r, w in results[n][0]] for n in VARIANTS}
    print(f"{'variant':16} {'step 1':>8} {'step ' + str(args.steps // 2):>8} {'step ' + str(args.steps):>8} "
          f"{'s/step':>7}")
    for name in VARIANTS:
        shares = [margin[name][i] / margin["fp32"][i] for i in (0, args.steps // 2 - 1, args.steps - 1)]
        print(f"{name:16} " + " ".join(f"{s:8.2f}" for s in shares) + f" {results[name][1]:7.2f}")


if __name__ == "__main__":
    main()
