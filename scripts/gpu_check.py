"""The precision and rollout-correction checks on a CUDA device, for the day a GPU machine is lent (issue 24 item 6).

    bash scripts/gpu_check.sh              # on CUDA: the checks and a table; without CUDA: one line, exit 0
    python scripts/gpu_check.py --device cpu   # the same checks on CPU (tests/unit/test_gpu_check.py runs this)

Needs only torch and transformers (the lent machine has no Ray, vLLM, pydantic or network): the trainer's config is
a plain namespace with the fields TorchStrategy reads; the model and the batch are the strategy tests' (tiny random
Llama, tests/helpers/train_batches.py). Each row compares the device's result with what it must equal:

    bf16 weights: gradient vs fp32       TorchStrategy with bf16 weights and fp32 masters against fp32 weights
    bf16 weights: masters stay fp32      after a step, the optimizer's copies are fp32 and the module their rounding
    correction weights vs CPU            truncated and masked IS (every level) on the device against CPU
    rejected tokens leave denominator    the loss over kept tokens only (slime's PR 657), on the device
    packed vs padded: logprobs, gradient  one packed stream per micro-batch against padded rows, fp32
    shared prompts vs padded              rows of one prompt packed as one unit (the prompt once, a tree mask), fp32

Then a timing table (no pass/fail; `--no-timing` skips it): one TorchStrategy train step over the same rows in fp32
padded, bf16 padded (`--padded-rows`: micro-batches of that many rows) and bf16 packed (`--budgets`: tokens per
packed micro-batch), on a randomly initialised model of SmolLM2-135M-Instruct's shape (the default model's weights
are not on the lent machine, and its shape is what the cost depends on), in real (unpadded) tokens per second.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlvr.algorithms.actor_objective import ObjectiveSettings, actor_objective  # noqa: E402
from rlvr.algorithms.rollout_correction import LEVELS, CorrectionSettings, correction_weights  # noqa: E402
from rlvr.backends.bf16_rounding import dithered_bf16  # noqa: E402
from rlvr.backends.torch_strategy import TorchStrategy  # noqa: E402
from tests.helpers.train_batches import make_group_batch, make_small_vocab_llama, make_train_batch  # noqa: E402

BATCH = make_train_batch(4, 24)  # rows of different lengths (right padding); one row's reward failed
GROUPS = make_group_batch(2, 3, 24)  # 2 prompts x 3 rows, one failed reward, one look-alike prompt


def trainer_cfg(bf16_weights: bool, max_tokens: int | None = None, micro_batch_size: int = 2) -> SimpleNamespace:
    """The fields of config/trainer.py's TrainerConfig that the torch strategy reads."""
    return SimpleNamespace(torch_threads=None, bf16_autocast=bf16_weights, uses_bf16_weights=bf16_weights,
                           gradient_checkpointing=False, lr=1e-3, betas=(0.9, 0.999), weight_decay=0.0,
                           lr_schedule="constant", warmup_steps=0, max_grad_norm=None, mini_batch_size=None,
                           micro_batch_size=micro_batch_size, max_tokens_per_micro_batch=max_tokens, ppo_epochs=1,
                           lora=None, bf16_rounding="dithered", share_prompt_prefix=True)


def train_grads(model_dir: str, bf16_weights: bool, device: str, max_tokens: int | None = None,
                batch=BATCH) -> tuple[TorchStrategy, torch.Tensor]:
    s = TorchStrategy(model_dir, trainer_cfg(bf16_weights, max_tokens), total_steps=4, seed=0, device=device)
    settings = ObjectiveSettings()
    s.train_step(batch, lambda lp, ent, mb, nt, ns: actor_objective(lp, ent, mb.tensors, settings, nt, ns))
    params = s.masters.values() if s.masters else s.model.parameters()
    return s, torch.cat([p.grad.flatten().float().cpu() for p in params])


def check_precision_and_packing(device: str) -> list[tuple[str, str, str, bool]]:
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_small_vocab_llama(Path(tmp) / "model")
        bf16, g16 = train_grads(model_dir, True, device)
        padded, g32 = train_grads(model_dir, False, device)
        packed, g_packed = train_grads(model_dir, False, device, max_tokens=40)
        lp_padded = TorchStrategy(model_dir, trainer_cfg(False), total_steps=1, seed=0, device=device,
                                  trainable=False).forward_logprobs(BATCH, loss_positions_only=True)
        lp_packed = TorchStrategy(model_dir, trainer_cfg(False, 40), total_steps=1, seed=0, device=device,
                                  trainable=False).forward_logprobs(BATCH, loss_positions_only=True)
        shared = [train_grads(model_dir, False, device, max_tokens=b, batch=GROUPS)[1] for b in (None, 48)]
        lp_shared = [TorchStrategy(model_dir, trainer_cfg(False, b), total_steps=1, seed=0, device=device,
                                   trainable=False).forward_logprobs(GROUPS, loss_positions_only=True)
                     for b in (None, 48)]
    lp_diff = float((lp_packed - lp_padded).abs().max())
    g_rel = float((g_packed - g32).norm() / g32.norm())
    lp_shared_diff = float((lp_shared[1] - lp_shared[0]).abs().max())
    g_shared_rel = float((shared[1] - shared[0]).norm() / shared[0].norm())
    rel = float((g16 - g32).norm() / g32.norm())
    masters_fp32 = all(m.dtype == torch.float32 for m in bf16.masters.values())
    rounded = all(torch.equal(p, dithered_bf16(bf16.masters[n], bf16.thresholds[n]))
                  for n, p in bf16.model.named_parameters())
    return [("bf16 weights: gradient vs fp32", f"rel diff {rel:.2e}", "< 5e-2", rel < 5e-2),
            ("bf16 weights: masters stay fp32", f"fp32 {masters_fp32}, module = dithered {rounded}", "both true",
             masters_fp32 and rounded),
            ("packed vs padded: logprobs, gradient", f"{lp_diff:.1e} abs, {g_rel:.1e} rel", "< 1e-4, < 1e-4",
             lp_diff < 1e-4 and g_rel < 1e-4),
            ("shared prompts vs padded", f"{lp_shared_diff:.1e} abs, {g_shared_rel:.1e} rel", "< 1e-4, < 1e-4",
             lp_shared_diff < 1e-4 and g_shared_rel < 1e-4)]


def check_correction(device: str) -> list[tuple[str, str, str, bool]]:
    g = torch.Generator().manual_seed(2)
    train = -torch.rand(8, 32, generator=g) * 3
    rollout = train + torch.randn(8, 32, generator=g) * 0.3
    mask = (torch.rand(8, 32, generator=g) > 0.2).float()
    worst = 0.0
    for level in LEVELS:
        for settings in (CorrectionSettings(is_level=level), CorrectionSettings(rs_level=level)):
            cpu = correction_weights(train, rollout, mask, settings)
            dev = correction_weights(train.to(device), rollout.to(device), mask.to(device), settings)
            worst = max(worst, float((dev[0].cpu() - cpu[0]).abs().max()))
            if not torch.equal(dev[1].cpu(), cpu[1]):
                worst = float("inf")
    rows = [("correction weights vs CPU", f"max abs diff {worst:.1e}", "< 1e-5", worst < 1e-5)]
    keep = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]], device=device)
    tensors = {"loss_mask": keep, "advantages": torch.ones_like(keep)}
    logp = torch.zeros_like(keep)
    loss, _ = actor_objective(logp, torch.zeros_like(logp), tensors, ObjectiveSettings(), keep.sum(),
                              (keep.sum(1) > 0).sum())
    rows.append(("rejected tokens leave denominator", f"loss {float(loss):.4f}", "-1.0000 (4 kept of 6)",
                 abs(float(loss) + 1.0) < 1e-6))
    return rows


# SmolLM2-135M-Instruct's architecture (its config.json), random weights; "tiny" keeps the CPU test quick.
SHAPES = {"smollm2-135m": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                               num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048),
          "tiny": dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)}


def timed_configurations(width: int, budgets: list[int] | None = None,
                         padded_rows: list[int] | None = None) -> dict[str, tuple[bool, int | None, int]]:
    """name: (bf16 weights, token budget per packed micro-batch or None for padded rows, rows per padded
    micro-batch). The default budget, 16 x width / 2 tokens, is about 16 padded rows' real tokens; larger budgets
    and micro-batches ask whether fewer, longer micro-batches pay where a step is launch-bound (an H100 at this
    model size)."""
    padded = {f"bf16 padded {r}": (True, None, r) for r in (padded_rows or [16])}
    packed = {f"bf16 packed {b}": (True, b, 16) for b in (budgets or [16 * width // 2])}
    return {"fp32 padded 16": (False, None, 16), **padded, **packed}


def time_train_steps(device: str, shape: str = "smollm2-135m", rows: int = 64, width: int = 512,
                     steps: int = 3, budgets: list[int] | None = None,
                     padded_rows: list[int] | None = None) -> list[tuple[str, float, float]]:
    """(configuration, seconds per step (median of `steps` after one warm-up), real tokens per second) for one
    train step over `rows` rows of 8..width tokens, in each of `timed_configurations`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    batch = make_train_batch(rows, width, seed=3)
    real_tokens = int(batch["attention_mask"].sum())
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        LlamaForCausalLM(LlamaConfig(**SHAPES[shape], tie_word_embeddings=True, pad_token_id=0, bos_token_id=1,
                                     eos_token_id=2)).save_pretrained(Path(tmp) / "m")
        for name, (bf16, budget, micro_rows) in timed_configurations(width, budgets, padded_rows).items():
            cfg = trainer_cfg(bf16, budget, micro_batch_size=micro_rows)
            s = TorchStrategy(str(Path(tmp) / "m"), cfg, total_steps=steps + 1, seed=0, device=device)
            settings = ObjectiveSettings()
            seconds = []
            for _ in range(steps + 1):
                if device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                s.train_step(batch, lambda lp, ent, mb, nt, ns: actor_objective(lp, ent, mb.tensors, settings,
                                                                                nt, ns))
                if device == "cuda":
                    torch.cuda.synchronize()
                seconds.append(time.perf_counter() - t0)
            median = sorted(seconds[1:])[len(seconds[1:]) // 2]
            out.append((name, median, real_tokens / median))
            del s
            if device == "cuda":
                torch.cuda.empty_cache()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--no-timing", action="store_true", help="the checks only, not the train-step timing")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm2-135m", help="the timed model's shape")
    parser.add_argument("--budgets", type=int, nargs="+", default=None,
                        help="token budgets per packed micro-batch to time (default: 4096, 16 rows x 512 / 2)")
    parser.add_argument("--padded-rows", type=int, nargs="+", default=None,
                        help="rows per padded bf16 micro-batch to time (default: 16)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per configuration, after one warm-up")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here: skipped (python scripts/gpu_check.py --device cpu runs it on CPU)")
        return 0
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU"
    rows = check_precision_and_packing(args.device) + check_correction(args.device)
    print(f"gpu_check on {name}: torch {torch.__version__}")
    print(f"{'check':<38} {'result':<38} {'expected':<22} ok")
    for check, result, expected, ok in rows:
        print(f"{check:<38} {result:<38} {expected:<22} {'yes' if ok else 'NO'}")
    if not args.no_timing:
        timed = time_train_steps(args.device, args.shape, steps=args.steps, budgets=args.budgets,
                                 padded_rows=args.padded_rows)
        base = timed[0][1]
        print(f"\ntrain step, {args.shape} shape, 64 rows of 8..512 tokens ({args.device}):")
        print(f"{'configuration':<18} {'s/step':>8} {'tokens/s':>10} {'vs fp32':>8}")
        for name, seconds, rate in timed:
            print(f"{name:<18} {seconds:8.3f} {rate:10.0f} {seconds / base:7.2f}x")
    return 0 if all(ok for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
