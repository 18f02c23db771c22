"""How close rlvr's step gets to the limit on one box, in one run:

    .venv/bin/python bench/limit.py [--steps 5] [--new-tokens 64] [key=value ...]

1. rlvr: `RLVRPipeline` on local Ray with configs/math.yaml (default model, vLLM generation, the torch strategy,
   the math rule reward, weight sync + parity probe every step), --steps steps; each step's wall-clock time and
   its groups are recorded (the step's own phase times come from metrics.jsonl).
2. The raw parts, for the same tokens of each step, in this process with no Ray, no scheduler, no sync:
   - generation: the same engine (`build_engine`, same settings) given every sample's prompt at once, each held
     to its recorded response length (min_tokens = max_tokens = length, EOS ignored);
   - train: `ActorTrainWorker.train` (the same strategy and loss) on the step's batch, built by the same
     `make_train_batch` (timed apart: batching);
   - reward: the domain's reward worker scoring every sample of the step at once.
The ratio is rlvr's step / (generation + train + reward), per step, median over steps 1.. (step 0 warms up).
The breakdown splits rlvr's step into weight sync, parity probe, batching, rollout (generation and rewards as
the schedulers run them, through Ray), the train call (the actor's compute plus the Ray call) and the rest, each
against its raw counterpart. Sums are of medians; the machine may be shared: ratios in one run hold, absolute
times do not carry over.
"""

from __future__ import annotations

import argparse
import asyncio
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


def recording_pipeline():
    """RLVRPipeline that keeps each step's groups and wall-clock end (bench only)."""
    from rlvr.pipeline.rlvr_pipeline import RLVRPipeline

    class Recording(RLVRPipeline):
        def __init__(self, cfg):
            super().__init__(cfg)
            self.groups: dict[int, list] = {}
            self.ends: dict[int, float] = {}
            log = self.trackers.log

            def stamped(metrics, step):
                log(metrics, step)
                self.ends[step] = time.perf_counter()

            self.trackers.log = stamped

        def forwards(self, batch):
            self.anchor = self.old_logprobs_source(batch)  # the raw train part does the same forward passes
            return super().forwards(batch)

        def train_on(self, groups, timer, step_lr):
            self.groups.setdefault(self.step, []).extend(g for gs in groups.values() for g in gs)
            return super().train_on(groups, timer, step_lr)

    return Recording


def run_rlvr(cfg) -> tuple[list[float], dict[int, list], list[dict], str | None]:
    pipeline = recording_pipeline()(cfg)
    try:
        start = time.perf_counter()
        run_dir = pipeline.run()
    finally:
        pipeline.close()
    ends = [start] + [pipeline.ends[s] for s in range(cfg.run.max_steps)]
    walls = [b - a for a, b in zip(ends, ends[1:])]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return walls, pipeline.groups, sorted(records, key=lambda r: r["step"]), getattr(pipeline, "anchor", None)


async def raw_generation(engine, groups, temperature: float, tag: str) -> float:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    async def one(i: int, prompt_ids: list[int], length: int):
        params = SamplingParams(max_tokens=max(length, 1), min_tokens=max(length, 1), ignore_eos=True,
                                temperature=temperature, seed=i, output_kind=RequestOutputKind.FINAL_ONLY)
        prompt = TokensPrompt(prompt_token_ids=prompt_ids)
        async for _ in engine.llm.generate(prompt, params, request_id=f"raw-{tag}-{i}"):
            pass

    samples = [(g.prompt.prompt_ids, len(s.response_ids)) for g in groups for s in g.samples]
    start = time.perf_counter()
    await asyncio.gather(*(one(i, p, n) for i, (p, n) in enumerate(samples)))
    return time.perf_counter() - start


async def raw_rewards(workers: dict, groups) -> float:
    start = time.perf_counter()
    await asyncio.gather(*(workers[g.domain].evaluate(s) for g in groups for s in g.samples))
    return time.perf_counter() - start


def raw_parts(cfg, model_path: str, groups_by_step: dict[int, list], steps: list[int], pad_id: int,
              anchor: str | None) -> dict:
    from rlvr.backends.dist import rendezvous_address
    from rlvr.pipeline.advantage_step import AdvantageStep
    from rlvr.pipeline.batching import make_train_batch
    from rlvr.pipeline.rollout import by_domain
    from rlvr.workers.actor_infer import build_engine
    from rlvr.workers.actor_train import ActorTrainWorker
    from rlvr.workers.rewards.reward_actor import build_reward_worker

    out = {k: {} for k in ("generation", "batching", "train", "reward")}
    loop = asyncio.new_event_loop()
    engine = build_engine(cfg, model_path, seed=0)
    try:
        loop.run_until_complete(raw_generation(engine, groups_by_step[steps[0]][:2], cfg.generation.temperature, "w"))
        for step in steps:
            out["generation"][step] = loop.run_until_complete(
                raw_generation(engine, groups_by_step[step], cfg.generation.temperature, str(step)))
    finally:
        engine.shutdown()
    trainer = ActorTrainWorker(cfg, model_path)
    advantages = AdvantageStep(cfg)
    trainer.setup(*rendezvous_address())
    for i, step in enumerate([steps[0]] + steps):  # the first one warms up
        start = time.perf_counter()
        batch, _, _ = make_train_batch(by_domain(groups_by_step[step]), list(cfg.domains), pad_id, seed=step,
                                       mask_truncated=cfg.rollout.mask_truncated)
        batching = time.perf_counter() - start
        start = time.perf_counter()
        # what the driver's step does around the update: the old-policy forward when the config needs one, the
        # advantages, then the update (no reference or critic in configs/math.yaml)
        if anchor == "actor":
            batch = batch.with_tensor("old_logp", trainer.compute_logprobs(batch))
        elif anchor == "behaviour":
            batch = batch.with_tensor("old_logp", batch["behav_logp"])
        batch, _ = advantages(batch)
        trainer.train(batch)
        if i:
            out["batching"][step], out["train"][step] = batching, time.perf_counter() - start
    del trainer
    workers = {d: build_reward_worker(d, dc.reward) for d, dc in cfg.domains.items()}
    try:
        loop.run_until_complete(raw_rewards(workers, groups_by_step[steps[0]][:2]))
        for step in steps:
            out["reward"][step] = loop.run_until_complete(raw_rewards(workers, groups_by_step[step]))
    finally:
        for w in workers.values():
            w.close()
        loop.close()
    return out


def med(values) -> float:
    return statistics.median(list(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("overrides", nargs="*", help="config overrides for both sides, e.g. generation.dtype=bfloat16")
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers import AutoTokenizer

    from rlvr.config import load_config
    from rlvr.models.default_model import resolve_model_path

    with tempfile.TemporaryDirectory(prefix="rlvr-bench-limit-") as out:
        cfg = load_config(REPO / "configs/math.yaml", [
            f"run.output_dir={out}", f"run.max_steps={args.steps}", "run.eval_every=0", "run.save_every=0",
            "run.progress_bar=false", "trackers.wandb=false", "trackers.tensorboard=false",
            f"generation.max_new_tokens={args.new_tokens}", *args.overrides])
        model_path = resolve_model_path(cfg.model.path, cfg.model.cache_dir)
        walls, groups, records, anchor = run_rlvr(cfg)
    steps = list(range(1, args.steps))
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    raw = raw_parts(cfg, model_path, groups, steps, tokenizer.pad_token_id or 0, anchor)
    report(cfg, args, walls, groups, records, raw, steps)


def report(cfg, args, walls, groups, records, raw, steps) -> None:
    rec = {r["step"]: r for r in records if "actor/loss" in r}

    def phase(name: str) -> dict[int, float]:
        return {s: rec[s].get(name, 0.0) for s in steps}

    raw_sum = {s: raw["generation"][s] + raw["train"][s] + raw["reward"][s] for s in steps}
    ratios = [walls[s] / raw_sum[s] for s in steps]
    sync = phase("weight_sync/seconds")
    parity = {s: phase("time/model_update")[s] - sync[s] for s in steps}
    rollout = {s: phase("time/generate")[s] + phase("time/reward_wait")[s] for s in steps}
    batching = phase("time/batch")
    train = {s: phase("time/forwards")[s] + phase("time/advantages")[s] + phase("time/train")[s] for s in steps}
    named = [sync, parity, batching, rollout, train]
    rest = {s: walls[s] - sum(p[s] for p in named) for s in steps}
    tokens = med(sum(len(x.response_ids) for g in groups[s] for x in g.samples) for s in steps)
    g = cfg.generation
    print(f"\nrlvr step vs its raw parts: {cfg.model.path}, {cfg.rollout.prompts_per_step} prompts x "
          f"{cfg.rollout.group_size} samples, up to {g.max_new_tokens} new tokens (median {tokens:.0f} per step), "
          f"T={g.temperature}, {g.engine} {g.dtype}, {cfg.actor_train.strategy} strategy "
          f"(bf16 autocast {cfg.actor_train.bf16_autocast}), weight sync {cfg.actor_train.weight_sync}; steps "
          f"{steps[0]}..{steps[-1]} (step 0 warms up); {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs")
    print(f"\n{'':<34} {'rlvr s':>8} {'raw s':>8} {'rlvr - raw':>10}")
    rows = [("weight sync", sync, None), ("parity probe", parity, None),
            ("batching (make_train_batch)", batching, raw["batching"]),
            ("rollout: generation + rewards", rollout, {s: raw["generation"][s] + raw["reward"][s] for s in steps}),
            ("  raw generation alone", None, raw["generation"]), ("  raw reward alone", None, raw["reward"]),
            ("train: forwards, advantages, update", train, raw["train"]),
            ("rest (driver, Ray calls, logging)", rest, None)]
    for name, mine, theirs in rows:
        a = med(mine.values()) if mine else None
        b = med(theirs.values()) if theirs else None
        cells = [f"{a:>8.2f}" if a is not None else f"{'':>8}", f"{b:>8.2f}" if b is not None else f"{'':>8}",
                 f"{a - (b or 0.0):>+10.2f}" if a is not None else f"{'':>10}"]
        print(f"{name:<34} {' '.join(cells)}")
    print(f"{'step (wall clock)':<34} {med(walls[s] for s in steps):>8.2f} {med(raw_sum.values()):>8.2f} "
          f"{med(walls[s] for s in steps) - med(raw_sum.values()):>+10.2f}")
    per_step = ", ".join(f"{r:.3f}" for r in ratios)
    print(f"\noverhead ratio rlvr / raw parts: median {med(ratios):.3f} (per step {per_step})"
          f"; target <= 1.10")


if __name__ == "__main__":  # vLLM spawns its engine processes: the guard is required
    main()
