"""Engines side by side, one run, one table per part:

    .venv/bin/python bench/engines.py [--parts generation training step] [--reps 3] [--steps 4]

1. generation: generated tokens/s, VLLMEngine vs HFEngine, batch 16 and 64 (prompts from data/math/train.jsonl,
   chat-formatted, n=1 each, T=0.7, up to --new-tokens, stop at EOS; interleaved reps, engines warmed first).
2. training: trained tokens/s, DeepSpeedStrategy (ZeRO-2, world_size 1) vs TorchStrategy, each in fp32 and in
   bf16 (torch: autocast; deepspeed: bf16 weights, fp32 masters): one optimizer step on 16 sequences of 128
   tokens (micro-batch 8) with rlvr's actor objective.
3. step: one full RLVR step on the same workload (model, prompts, group size, generation length, learning
   rate, batch = one optimizer step) for rlvr (RLVRPipeline on local Ray: vLLM generation, the math rule reward)
   and for TRL's GRPOTrainer (HF generate, its default on CPU; a last-number reward in the trainer's process),
   each in fp32 and in bf16 (rlvr: vLLM in bfloat16, training in autocast); the ratio is taken against TRL at
   the same precision. rlvr runs its main job's strategy (DeepSpeed ZeRO-2) and, in bf16, its one-process
   `torch` strategy. Step time is the median over steps 1..N-1 (step 0 warms up both). TRL is installed for
   this benchmark only, into .cache/bench-trl (never into the project's environment).

Model: SmolLM2-135M-Instruct (the embedded default). The machine may be shared: the ratios, measured side by side
in this one run, hold; absolute figures do not carry over to another run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TRL_DIR = REPO / ".cache" / "bench-trl"
TRL_PINS = ["trl==1.16.0", "accelerate==1.15.0"]


def spread(values: list[float], fmt: str = ".1f") -> str:
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}, {max(values):{fmt}}]"


def chat_prompts(tokenizer, n: int) -> tuple[list[dict], list[list[int]]]:
    rows = [json.loads(line) for line in (REPO / "data/math/train.jsonl").read_text().splitlines()][:n]
    ids = [tokenizer.apply_chat_template(r["messages"], tokenize=True, add_generation_prompt=True) for r in rows]
    return rows, [list(p["input_ids"] if hasattr(p, "keys") else p) for p in ids]


# ------------------------------------------------------------------------------------------- 1. generation
async def generation(model: str, args) -> None:
    import torch
    from transformers import AutoTokenizer

    from rlvr.backends.hf_engine import HFEngine
    from rlvr.backends.vllm_engine import VLLMEngine
    from rlvr.data.types import SamplingParams

    torch.set_num_threads(args.threads)
    _, prompts = chat_prompts(AutoTokenizer.from_pretrained(model), max(args.batches))
    sampling = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.7)
    engines = {"hf": HFEngine(model, dtype="float32", max_batch_size=max(args.batches)),
               "vllm": VLLMEngine(model, dtype="float32", max_batch_size=max(args.batches), max_model_len=1024,
                                  omp_threads=args.threads)}

    async def timed(engine, batch) -> float:
        start = time.perf_counter()
        results = await asyncio.gather(*(engine.generate(p, 1, sampling) for p in prompts[:batch]))
        return sum(len(g.token_ids) for gens in results for g in gens) / (time.perf_counter() - start)

    for engine in engines.values():
        await timed(engine, 4)
    rates: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.reps):
        for batch in args.batches:
            for name, engine in engines.items():  # interleaved: load changes hit both engines alike
                rates.setdefault((name, batch), []).append(await timed(engine, batch))
    engines["vllm"].shutdown()
    print(f"\n[1] generation: float32, {args.threads} threads, up to {args.new_tokens} new tokens, T=0.7, "
          f"{args.reps} reps")
    print(f"{'batch':>5}  {'engine':<6} {'tokens/s median [min, max]':>28}  {'vllm/hf':>7}")
    for batch in args.batches:
        hf, vllm = (statistics.median(rates[(n, batch)]) for n in ("hf", "vllm"))
        print(f"{batch:>5}  {'hf':<6} {spread(rates[('hf', batch)]):>28}")
        print(f"{batch:>5}  {'vllm':<6} {spread(rates[('vllm', batch)]):>28}  {vllm / hf:>6.2f}x")


# ------------------------------------------------------------------------------------------- 2. training
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def training(model: str, args) -> None:
    import torch
    from transformers import AutoTokenizer

    from rlvr.algorithms.actor_objective import ObjectiveSettings, actor_objective
    from rlvr.backends.deepspeed_strategy import DeepSpeedStrategy
    from rlvr.backends.torch_strategy import TorchStrategy
    from rlvr.config.trainer import ActorTrainConfig
    from rlvr.data.batch import TrainBatch

    n, width = 16, 128
    tokenizer = AutoTokenizer.from_pretrained(model)
    _, prompts = chat_prompts(tokenizer, n)
    g = torch.Generator().manual_seed(0)
    ids = torch.stack([torch.tensor((p + torch.randint(100, 20000, (width,), generator=g).tolist())[:width])
                       for p in prompts])
    loss_mask = torch.zeros(n, width - 1)
    for i, p in enumerate(prompts):
        loss_mask[i, len(p) - 1 :] = 1.0
    batch = TrainBatch({"input_ids": ids, "attention_mask": torch.ones_like(ids), "loss_mask": loss_mask,
                        "advantages": torch.randn(n, 1, generator=g) * loss_mask})
    settings = ObjectiveSettings()

    def loss_fn(logp, entropy, micro, n_tokens, n_seqs):
        return actor_objective(logp, entropy, micro.tensors, settings, n_tokens, n_seqs)

    strategies = {}
    # fp32; autocast: bf16 compute over fp32 weights; bf16: bf16 weights and compute, fp32 masters
    for precision, (autocast, bf16_weights) in {"fp32": (False, False), "autocast": (True, False),
                                                "bf16": (True, True)}.items():
        cfg = ActorTrainConfig(lr=1e-6, micro_batch_size=8, bf16_autocast=autocast, bf16_weights=bf16_weights,
                               torch_threads=args.threads)
        strategies[f"torch {precision}"] = TorchStrategy(model, cfg, total_steps=100, seed=0)
        strategies[f"deepspeed {precision}"] = DeepSpeedStrategy(
            model, cfg, total_steps=100, seed=0, rank=0, world_size=1, master_addr="127.0.0.1",
            master_port=free_port(), bf16_weights=bf16_weights)
    for s in strategies.values():
        s.train_step(batch, loss_fn)  # warm-up (DeepSpeed builds its buffers on the first step)
    rates: dict[str, list[float]] = {name: [] for name in strategies}
    for _ in range(args.reps):
        for name, s in strategies.items():
            start = time.perf_counter()
            s.train_step(batch, loss_fn)
            rates[name].append(n * width / (time.perf_counter() - start))
    print(f"\n[2] training: one optimizer step on {n} x {width} tokens, micro-batch 8, {args.threads} threads, "
          f"{args.reps} reps")
    print(f"{'strategy':<18} {'tokens/s median [min, max]':>28}  {'vs torch fp32':>13}")
    base = statistics.median(rates["torch fp32"])
    for name, r in rates.items():
        print(f"{name:<18} {spread(r):>28}  {statistics.median(r) / base:>12.2f}x")


# ------------------------------------------------------------------------------------------- 3. full step
STEP = {"prompts": 8, "group": 4, "new_tokens": 64, "temperature": 0.7, "lr": 1e-6}


def rlvr_step_times(model: str, args, out: str, strategy: str, bf16: bool) -> list[float]:
    from rlvr.config.load import load_config
    from rlvr.pipeline.rlvr_pipeline import RLVRPipeline

    cfg = load_config(REPO / "configs/math.yaml", [
        f"model.path={model}", f"run.output_dir={out}", f"run.max_steps={args.steps}", "run.eval_every=0",
        "run.save_every=0", "run.progress_bar=false", "trackers.wandb=false", "trackers.tensorboard=false",
        f"rollout.prompts_per_step={STEP['prompts']}", f"rollout.group_size={STEP['group']}",
        f"generation.max_new_tokens={STEP['new_tokens']}", f"generation.temperature={STEP['temperature']}",
        f"actor_train.lr={STEP['lr']}", "generation.engine=vllm", f"actor_train.strategy={strategy}",
        f"actor_train.bf16_autocast={str(bf16).lower()}", f"generation.dtype={'bfloat16' if bf16 else 'float32'}",
        "actor_train.bf16_weights=false"])  # as configs/math_code_mix.yaml: fp32 weights, autocast
    pipeline = RLVRPipeline(cfg)
    try:
        run_dir = pipeline.run()
    finally:
        pipeline.close()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["time/step"] for r in sorted(records, key=lambda r: r["step"]) if "time/step" in r]


def ensure_trl() -> None:
    """TRL and accelerate into a folder of their own (no dependencies pulled: the project's environment already
    has torch, transformers and datasets, and must not see them change)."""
    if not (TRL_DIR / "trl").is_dir() or not (TRL_DIR / "accelerate").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(TRL_DIR),
                        *TRL_PINS], check=True)
    sys.path.insert(0, str(TRL_DIR))


def trl_step_times(model: str, args, out: str, bf16: bool) -> list[float]:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlvr.workers.rewards.math_answer import extract_answer

    torch.set_num_threads(args.threads)
    rows = [json.loads(line) for line in (REPO / "data/math/train.jsonl").read_text().splitlines()]
    data = Dataset.from_list([{"prompt": r["messages"], "ground_truth": r["ground_truth"]} for r in rows])

    def last_number_reward(completions, ground_truth, **_):
        answers = [extract_answer(c[-1]["content"] if isinstance(c, list) else c)[0] for c in completions]
        return [float(a is not None and a.strip() == gt) for a, gt in zip(answers, ground_truth)]

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []

        def on_step_begin(self, *a, **k):
            self.start = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.times.append(time.perf_counter() - self.start)

    batch = STEP["prompts"] * STEP["group"]
    config = GRPOConfig(
        output_dir=out, use_cpu=True, bf16=bf16, max_steps=args.steps, per_device_train_batch_size=batch,
        gradient_accumulation_steps=1, num_generations=STEP["group"], max_completion_length=STEP["new_tokens"],
        temperature=STEP["temperature"], learning_rate=STEP["lr"], lr_scheduler_type="constant", beta=0.0,
        loss_type="dapo",
        logging_steps=1, save_strategy="no", report_to=[], seed=42, dataloader_num_workers=0)
    timer = StepTimer()
    trainer = GRPOTrainer(model=model, reward_funcs=last_number_reward, args=config, train_dataset=data,
                          callbacks=[timer])
    trainer.train()
    return timer.times


STEP_RUNS = {  # name: (framework, strategy, bf16)
    "rlvr deepspeed fp32": ("rlvr", "deepspeed", False),
    "trl fp32": ("trl", None, False),
    "rlvr deepspeed bf16": ("rlvr", "deepspeed", True), "rlvr torch bf16": ("rlvr", "torch", True),
    "trl bf16": ("trl", None, True)}


def full_step(model: str, args) -> None:
    times: dict[str, list[float]] = {}
    for name, (framework, strategy, bf16) in STEP_RUNS.items():
        with tempfile.TemporaryDirectory() as out:
            if framework == "rlvr":
                times[name] = rlvr_step_times(model, args, out, strategy, bf16)
            else:
                times[name] = trl_step_times(model, args, out, bf16)
    print(f"\n[3] one RLVR step: {STEP['prompts']} prompts x {STEP['group']} samples, up to {STEP['new_tokens']} "
          f"new tokens, T={STEP['temperature']}, one optimizer step, {args.steps} steps (step 0 dropped)")
    print(f"{'framework':<20} {'s/step median [min, max]':>26}  {'vs trl, same precision':>22}")
    for name, t in times.items():
        trl = statistics.median(times[f"trl {name.split()[-1]}"][1:])
        print(f"{name:<20} {spread(t[1:], '.2f'):>26}  {statistics.median(t[1:]) / trl:>21.2f}x")
    print("rlvr: vLLM generation + training on local Ray; trl: GRPOTrainer (HF generate). bf16: vLLM in bfloat16 "
          "and training in autocast over fp32 weights (rlvr), GRPOConfig(bf16=True) (trl)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", nargs="+", default=["generation", "training", "step"],
                        choices=["generation", "training", "step"])
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    args = parser.parse_args()
    if len(args.parts) > 1:
        # One process per part: a part's engines and strategies (four 135M models with their optimizer states in
        # part 2, ~10 GB) are gone before the next one starts, instead of pushing the full step's Ray workers
        # into the memory monitor's kill range.
        common = ["--batches", *map(str, args.batches), "--new-tokens", str(args.new_tokens), "--reps",
                  str(args.reps), "--steps", str(args.steps), "--threads", str(args.threads), "--model", args.model]
        for part in args.parts:
            subprocess.run([sys.executable, __file__, "--parts", part, *common], check=True)
        return
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if "step" in args.parts:  # before transformers is imported: it records at import whether accelerate exists
        ensure_trl()
    from rlvr.models.default_model import resolve_model_path

    model = resolve_model_path(args.model, None)
    print(f"model {Path(model).name}; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    if "generation" in args.parts:
        asyncio.run(generation(model, args))
    if "training" in args.parts:
        training(model, args)
    if "step" in args.parts:
        full_step(model, args)


if __name__ == "__main__":  # vLLM spawns its engine processes: the guard is required
    main()
