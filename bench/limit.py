"""How close rlvr's step gets to the limit on one box, in one run:

    .venv/bin/python bench/limit.py [--steps 5] [--new-tokens 64] [key=value ...]

1. rlvr: `RLVRPipeline` on local Ray with configs/math.yaml (default model, vLLM generation, the torch strategy,
   the math rule reward, weight sync + parity probe every step), --steps steps; each step's wall-clock time and
   its groups are recorded (the step's own phase times come from metrics.jsonl).
2. The raw parts, for the same tokens of each step, with no Ray, no scheduler, no sync:
   - generation: the same engine (`build_engine`, same settings) given every sample's prompt at once, each held
     to its recorded response length (min_tokens = max_tokens = length, EOS ignored);
   - train: `ActorTrainWorker.train` (the same strategy and loss) on the step's batch, built by the same
     `make_train_batch` (timed apart: batching), in a process of its own;
   - reward: the domain's reward worker scoring every sample of the step at once;
   - the box's limit for the update: a plain loop with no rlvr code (`plain_trainer`: the model in pure bf16 where
     the host computes bf16 natively, else pure fp32 (rlvr/config/precision.py: an AVX2 CPU emulates bf16), AdamW,
     GRPO advantages, the step's sequences sorted by length into micro-batches), in a process of its own. The limit
     is raw generation + plain train + raw reward; run with `generation.dtype=bfloat16` for the bf16 limit.
Interleaved: right after rlvr logs step s, the raw parts of step s run while the pipeline's actors sit idle, and
rlvr's step s+1 is timed from when they finish. This machine's speed drifts by 20-30% over minutes (one fixed
train call: 16.5-21.3 s); measured side by side step by step, the drift hits both sides alike.
The ratio is rlvr's step / (generation + train + reward), per step, median over steps 1.. (step 0 warms up).
The breakdown splits rlvr's step into weight sync, parity probe, batching, rollout (generation and rewards as
the schedulers run them, through Ray), the train call (the actor's compute plus the Ray call) and the rest, each
against its raw counterpart. Sums are of medians; ratios in one run hold, absolute times do not carry over.
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

from rlvr.config.precision import host_precision  # noqa: E402  (light: no torch)


def recording_pipeline():
    """RLVRPipeline that keeps each step's groups and times each step, running `between(step, groups, anchor)`
    after each step is logged, outside the step's time (bench only)."""
    from rlvr.pipeline.rlvr_pipeline import RLVRPipeline

    class Recording(RLVRPipeline):
        def __init__(self, cfg, between):
            super().__init__(cfg)
            self.groups: dict[int, list] = {}
            self.walls: dict[int, float] = {}
            self.anchor: str | None = None
            self.started = time.perf_counter()
            log = self.trackers.log

            def stamped(metrics, step):
                log(metrics, step)
                if step in self.walls or step not in self.groups:
                    return  # the final validation, or a step that trained nothing
                self.walls[step] = time.perf_counter() - self.started
                between(step, self.groups[step], self.anchor)
                self.started = time.perf_counter()

            self.trackers.log = stamped

        def forwards(self, batch):
            self.anchor = self.old_logprobs_source(batch)  # the raw train part does the same forward passes
            return super().forwards(batch)

        def train_on(self, groups, timer, step_lr):
            self.groups.setdefault(self.step, []).extend(g for gs in groups.values() for g in gs)
            return super().train_on(groups, timer, step_lr)

    return Recording


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


def raw_trainer(conn, cfg, model_path: str) -> None:
    """The raw train part in a process of its own, as a hand-written training loop would run: receives
    (batch, anchor), does what the driver's step does around the update, sends back the seconds; None ends it.
    Its own process, because in the driver's (Ray's driver, an engine client, the pipeline's state) the same
    train call ran 0.7-3.3 s slower than rlvr's actor in 8 of 8 steps: a handicap of the raw side's, not a part."""
    from rlvr.backends.dist import rendezvous_address
    from rlvr.pipeline.advantage_step import AdvantageStep
    from rlvr.workers.actor_train import ActorTrainWorker

    trainer = ActorTrainWorker(cfg, model_path)
    trainer.setup(*rendezvous_address())
    advantages = AdvantageStep(cfg)
    conn.send("ready")
    while (job := conn.recv()) is not None:
        batch, anchor = job
        start = time.perf_counter()
        # the old-policy forward when the config needs one, the advantages, then the update (no reference or
        # critic in configs/math.yaml)
        if anchor == "actor":
            batch = batch.with_tensor("old_logp", trainer.compute_logprobs(batch))
        elif anchor == "behaviour":
            batch = batch.with_tensor("old_logp", batch["behav_logp"])
        batch, _ = advantages(batch)
        trainer.train(batch)
        conn.send(time.perf_counter() - start)


def plain_trainer(conn, model_path: str, lr: float, micro_batch: int, threads: int | None, bf16: bool) -> None:
    """The box's limit for the update: a hand-written loop with no rlvr code. The model in pure bf16 where the host
    has it natively, else fp32 (weights, gradients and AdamW states: cheaper than any mixed-precision scheme), GRPO
    advantages computed here, sequences sorted by length into micro-batches of `micro_batch` (what a hand-written
    loop does to avoid padding; the few pad tokens left are counted), token-mean policy-gradient loss over the
    response tokens, one optimizer step per batch. Receives a step's samples as (group id, prompt ids, response ids,
    reward); sends back (seconds, pad fraction); None ends it."""
    import torch
    from transformers import AutoModelForCausalLM

    if threads:
        torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.bfloat16 if bf16 else torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    conn.send("ready")
    while (samples := conn.recv()) is not None:
        start = time.perf_counter()
        rewards: dict[str, list[float]] = {}
        for gid, _, _, r in samples:
            rewards.setdefault(gid, []).append(r)
        stats = {g: (statistics.mean(v), statistics.pstdev(v)) for g, v in rewards.items()}
        rows = sorted(((p + q, len(p), (r - stats[g][0]) / (stats[g][1] + 1e-6)) for g, p, q, r in samples),
                      key=lambda row: len(row[0]))
        n_loss = sum(len(ids) - n_prompt for ids, n_prompt, _ in rows)
        real = sum(len(ids) for ids, _, _ in rows)
        padded = 0
        optimizer.zero_grad(set_to_none=True)
        for i in range(0, len(rows), micro_batch):
            chunk = rows[i:i + micro_batch]
            width = max(len(ids) for ids, _, _ in chunk)
            padded += width * len(chunk)
            ids = torch.tensor([r[0] + [0] * (width - len(r[0])) for r in chunk])
            attention = torch.tensor([[1] * len(r[0]) + [0] * (width - len(r[0])) for r in chunk])
            mask = torch.tensor([[0.0] * r[1] + [1.0] * (len(r[0]) - r[1]) + [0.0] * (width - len(r[0]))
                                 for r in chunk])[:, 1:]
            adv = torch.tensor([r[2] for r in chunk])[:, None]
            logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
            logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            loss = -(adv * logp * mask).sum() / n_loss
            loss.backward()
        optimizer.step()
        conn.send((time.perf_counter() - start, 1 - real / padded))


class RawParts:
    """The raw parts, built once: an engine and the reward workers in this process, the trainer in a process of
    its own. `measure` times them on one step's groups; the first call (step 0) warms each up and is not
    reported."""

    def __init__(self, cfg, model_path: str, pad_id: int):
        import multiprocessing

        from rlvr.workers.actor_infer import build_engine
        from rlvr.workers.rewards.reward_actor import build_reward_worker

        self.cfg, self.pad_id = cfg, pad_id
        self.times: dict[str, dict[int, float]] = {k: {} for k in ("generation", "batching", "train", "reward",
                                                                   "plain_train", "plain_pads")}
        self.loop = asyncio.new_event_loop()
        spawn = multiprocessing.get_context("spawn")
        self.conn, child = spawn.Pipe()
        self.trainer = spawn.Process(target=raw_trainer, args=(child, cfg, model_path), daemon=True)
        self.trainer.start()
        if self.conn.recv() != "ready":
            raise RuntimeError("the raw trainer did not start")
        self.plain_conn, child = spawn.Pipe()
        self.plain = spawn.Process(target=plain_trainer, daemon=True, args=(
            child, model_path, cfg.actor_train.lr, cfg.actor_train.micro_batch_size, cfg.actor_train.torch_threads,
            host_precision()[0]))
        self.plain.start()
        if self.plain_conn.recv() != "ready":
            raise RuntimeError("the plain trainer did not start")
        self.engine = build_engine(cfg, model_path, seed=0)
        self.rewards = {d: build_reward_worker(d, dc.reward) for d, dc in cfg.domains.items()}

    def measure(self, step: int, groups: list, anchor: str | None) -> None:
        from rlvr.pipeline.batching import make_train_batch
        from rlvr.pipeline.rollout import by_domain

        run = self.loop.run_until_complete
        generation = run(raw_generation(self.engine, groups, self.cfg.generation.temperature, str(step)))
        start = time.perf_counter()
        batch, _, _ = make_train_batch(by_domain(groups), list(self.cfg.domains), self.pad_id,
                                       seed=self.cfg.run.seed + step,  # the pipeline's: the same rows in the same order
                                       mask_truncated=self.cfg.rollout.mask_truncated)
        batching = time.perf_counter() - start
        self.conn.send((batch, anchor))
        train = self.conn.recv()
        reward = run(raw_rewards(self.rewards, groups))
        self.plain_conn.send([(g.prompt.uid, list(g.prompt.prompt_ids), list(x.response_ids), x.reward.reward)
                              for g in groups for x in g.samples if x.reward is not None])
        plain_train, plain_pads = self.plain_conn.recv()
        if step:
            for key, value in (("generation", generation), ("batching", batching), ("train", train),
                               ("reward", reward), ("plain_train", plain_train), ("plain_pads", plain_pads)):
                self.times[key][step] = value

    def close(self) -> None:
        try:
            for conn, process in ((self.conn, self.trainer), (self.plain_conn, self.plain)):
                conn.send(None)
                process.join(timeout=60)
                if process.is_alive():
                    process.kill()
            self.engine.shutdown()
            for worker in self.rewards.values():
                worker.close()
            pending = asyncio.all_tasks(self.loop)  # the engine's output handler
            for task in pending:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        finally:
            self.loop.close()


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

    from rlvr.config.load import load_config
    from rlvr.models.default_model import resolve_model_path

    with tempfile.TemporaryDirectory(prefix="rlvr-bench-limit-") as out:
        cfg = load_config(REPO / "configs/math.yaml", [
            f"run.output_dir={out}", f"run.max_steps={args.steps}", "run.eval_every=0", "run.save_every=0",
            "run.progress_bar=false", "trackers.wandb=false", "trackers.tensorboard=false",
            f"generation.max_new_tokens={args.new_tokens}", *args.overrides])
        model_path = resolve_model_path(cfg.model.path, cfg.model.cache_dir)
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        raw = RawParts(cfg, model_path, tokenizer.pad_token_id or 0)
        pipeline = None
        try:
            pipeline = recording_pipeline()(cfg, raw.measure)
            run_dir = pipeline.run()
        finally:
            raw.close()  # first: the pipeline's guardian would kill this process's engine as a leftover
            if pipeline is not None:
                pipeline.close()
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [s for s in sorted(pipeline.walls) if s]
    report(cfg, args, pipeline.walls, pipeline.groups, sorted(records, key=lambda r: r["step"]), raw.times, steps)


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
    print(f"\n{'step':>4} {'rlvr s':>8} {'raw s':>8} {'ratio':>6}   {'sync+probe':>10} {'train rlvr':>10} "
          f"{'train raw':>9} {'gen+rew rlvr':>12} {'gen+rew raw':>11}")
    for s, r in zip(steps, ratios):
        print(f"{s:>4} {walls[s]:>8.2f} {raw_sum[s]:>8.2f} {r:>6.3f}   {sync[s] + parity[s]:>10.2f} "
              f"{train[s]:>10.2f} {raw['train'][s]:>9.2f} {rollout[s]:>12.2f} "
              f"{raw['generation'][s] + raw['reward'][s]:>11.2f}")
    certain = [(sync[s] + parity[s] + batching[s] + rest[s]) / raw_sum[s] for s in steps]
    per_step = ", ".join(f"{r:.3f}" for r in ratios)
    print(f"\nthe overhead outside the measured parts (sync, probe, batching, rest) / raw parts: median "
          f"{med(certain):.3f}")
    print(f"overhead ratio rlvr / raw parts: median {med(ratios):.3f} (per step {per_step})"
          f"; target <= 1.10")
    # The box's limit: the same generation and rewards, the update by a plain loop (plain_trainer)
    limit = {s: raw["generation"][s] + raw["plain_train"][s] + raw["reward"][s] for s in steps}
    to_limit = [walls[s] / limit[s] for s in steps]
    plain = "pure-bf16" if host_precision()[0] else f"pure-fp32 ({host_precision()[1]})"
    print(f"\nthe box's limit (vLLM {g.dtype} generation of the same requests + a plain {plain} train loop over "
          f"the same tokens, {med(raw['plain_pads'].values()):.1%} pads after sorting by length + rewards):")
    print(f"{'step':>4} {'rlvr s':>8} {'limit s':>8} {'ratio':>6}   {'train rlvr':>10} {'train plain':>11}")
    for s, r in zip(steps, to_limit):
        print(f"{s:>4} {walls[s]:>8.2f} {limit[s]:>8.2f} {r:>6.3f}   {train[s]:>10.2f} {raw['plain_train'][s]:>11.2f}")
    print(f"rlvr / the box's limit: median {med(to_limit):.3f} (per step {', '.join(f'{r:.3f}' for r in to_limit)})"
          f"; target <= 1.15")


if __name__ == "__main__":  # vLLM spawns its engine processes: the guard is required
    main()
