"""Slow remote rewards: the asynchronous-reward recipe's experiment (verl reward agent, KaLM team), scaled to
this machine, in one run and one table.

    .venv/bin/python bench/async_reward.py [--steps 6] [--concurrency 4]

The recipe: GRPO, 1024 prompts x 5 samples per step, 4 PPO mini-batches, 256 concurrent reward calls, each call
1-40 s; the reward floor (samples x mean latency / concurrency, ~410 s) over the GPU work (~250 s) is ~1.64.
Here: the same proportions (prompts x 5 samples, 4 mini-batches, samples / concurrency = 20 calls per slot)
on a small random-weight model, with an LLM-judge reward (LLMJudgeRewardWorker, the real worker) calling a
stand-in judge: a real HTTP server on loopback, in its own process, that answers after a latency drawn from
U(a, b), b = 40 a. The compute per step is measured first (a calibration run whose judge answers at once); the
latency range is then set so that floor / compute = 410 / 250.

Modes (each a fresh RLVRPipeline on the same Ray cluster, same seed and data):
  sync        rewards requested after the step's generation, then train on the whole batch
  pipeline    + overlap.mini_batch_pipeline (train each mini-batch when its groups are in)
  off-policy  + overlap.one_step_off_policy (generate step t+1 and request its rewards before training t)
  both        pipeline + off-policy
  streaming   both + overlap.streaming_rewards (each sample's request leaves when the sample is generated)
Step time is the mean over steps 2..N-1: step 0 warms the engines up and, off-policy, starts two rollouts, and
step 1 (off-policy) trains on a rollout whose rewards had all of step 0 to arrive; neither is the steady state.
The bound is max(compute, floor) with compute from the calibration run and the floor as measured in that mode.
The judge's verdict is a hash of the response (a stand-in, not a judge): the mean reward only checks that every
mode scored the same kind of batches.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import multiprocessing as mp
import platform
import random
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlvr.sim import OVERLAP_MODES as MODES  # noqa: E402  (light: the spawned judge re-imports this script)

RECIPE_FLOOR_OVER_COMPUTE = 410 / 250
WARMUP_STEPS = 2
JUDGE_TIMEOUT_S = 120.0  # reward.timeout_s: no call comes near it here


# ---------------------------------------------------------------------------------------------------- judge
def serve_judge(port: int, low: mp.Value, high: mp.Value, peak: mp.Value) -> None:
    """The stand-in judge (own process): OpenAI chat completions, latency U(low, high) per request."""
    from aiohttp import web

    rng, active, draws = random.Random(0), [0], []

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        active[0] += 1
        peak.value = max(peak.value, active[0])
        draws.append(rng.uniform(low.value, high.value))
        try:
            await asyncio.sleep(draws[-1])
        finally:
            active[0] -= 1
        digest = hashlib.sha256(json.dumps(body["messages"]).encode()).digest()
        verdict = "YES" if digest[0] % 2 else "NO"
        return web.json_response({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                  "choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant", "content": verdict}}]})

    async def taken(request: web.Request) -> web.Response:
        """The latencies drawn since the last call, in arrival order (what a simulation replays)."""
        out = list(draws)
        draws.clear()
        return web.json_response(out)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/draws", taken)
    web.run_app(app, host="127.0.0.1", port=port, print=None, handle_signals=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------------- runs
def config_tree(model_dir: str, out: str, url: str, args, mode: dict, return_logprobs: bool = False) -> dict:
    judge = {"worker": "rlvr.workers.rewards.llm_judge.LLMJudgeRewardWorker", "max_concurrency": args.concurrency,
             "timeout_s": JUDGE_TIMEOUT_S, "args": {"base_url": url, "cache_size": 0, "max_tokens": 4}}
    return {
        "run": {"max_steps": args.steps, "eval_every": 0, "save_every": 0, "output_dir": out, "name": "bench",
                "progress_bar": False, "seed": 1},
        "trackers": {"wandb": False, "tensorboard": False, "jsonl": True},
        "model": {"path": model_dir},
        "data": {"train_files": [str(REPO / "data/math/train.jsonl")], "domain_key": "none", "tag_key": "domain",
                 "tag_to_domain": {"arithmetic": "judge", "word_problems": "judge"}},
        "domains": {"judge": {"reward": judge}},
        "rollout": {"prompts_per_step": args.prompts, "group_size": 5},
        # generation in several engine batches, as a large rollout is: streaming can start rewards early
        "generation": {"max_new_tokens": args.max_new_tokens, "temperature": 1.0,
                       "max_batch_size": args.prompts * 5 // 4, "return_logprobs": return_logprobs},
        "actor_train": {"lr": 1e-5, "micro_batch_size": args.prompts * 5 // 4,
                        "mini_batch_size": args.prompts * 5 // 4, "bf16_autocast": False},
        "algorithm": {"preset": "grpo"},
        "overlap": mode,
    }


def run_mode(tree: dict) -> list[dict]:
    """Every step's metrics of one run (steps 0..N-1)."""
    from rlvr.config.load import config_from_dict
    from rlvr.pipeline.rlvr_pipeline import RLVRPipeline

    pipeline = RLVRPipeline(config_from_dict(tree))
    try:
        run_dir = pipeline.run()
    finally:
        pipeline.close()
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def mean(records: list[dict], key: str) -> float:
    """Mean of `key` over the steady steps (from WARMUP_STEPS on)."""
    values = [r[key] for r in records if key in r and r["step"] >= WARMUP_STEPS]
    return sum(values) / len(values) if values else float("nan")


def judge_draws(url: str) -> list[float]:
    """The latencies the stand-in judge drew since the last call, in arrival order; the call clears them."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url.removesuffix("/v1") + "/draws", timeout=10) as response:
        return json.loads(response.read())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--prompts", type=int, default=16)  # x 5 samples = 80 = 20 calls per slot at C = 4
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--save", type=Path, help="write the settings, every step's metrics and the judge's drawn "
                        "latencies per mode here (JSON): bench/async_at_scale.py --measured replays them")
    args = parser.parse_args()

    import ray

    from rlvr.models.default_model import ensure_default_model
    from rlvr.models.tiny_model import make_tiny_model

    work = Path(tempfile.mkdtemp(prefix="rlvr-bench-async-"))
    model_dir = make_tiny_model(work / "model", ensure_default_model(), args.hidden, args.layers)
    ctx = mp.get_context("spawn")  # a fresh interpreter: the server shares no state (or GIL) with the driver
    low, high, peak = ctx.Value("d", 0.0), ctx.Value("d", 0.0), ctx.Value("i", 0)
    port = free_port()
    server = ctx.Process(target=serve_judge, args=(port, low, high, peak), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}})
    try:
        calib = run_mode(config_tree(model_dir, str(work / "calib"), url, args, MODES["sync"]))
        # what generation costs more with behaviour logprobs (the overlapped modes anchor on them): for --save
        calib_behaviour = (run_mode(config_tree(model_dir, str(work / "calib_b"), url, args, MODES["sync"], True))
                           if args.save else [])
        compute = mean(calib, "timing/compute")
        samples = args.prompts * 5
        floor_target = compute * RECIPE_FLOOR_OVER_COMPUTE
        mu = floor_target * args.concurrency / samples
        low.value, high.value = 2 * mu / 41, 80 * mu / 41  # U(a, 40a) with mean mu, as 1-40 s in the recipe
        rows, saved = [], {}
        for name, mode in MODES.items():
            peak.value = 0
            judge_draws(url)  # clears what earlier runs drew
            records = run_mode(config_tree(model_dir, str(work / name), url, args, mode))
            saved[name] = {"records": records, "draws": judge_draws(url)}
            rows.append((name, mean(records, "time/step"), mean(records, "timing/reward_floor"),
                         mean(records, "timing/reward_wait"), mean(records, "timing/overlap"),
                         mean(records, "judge/reward/mean"), peak.value))
    finally:
        ray.shutdown()
        server.terminate()
        shutil.rmtree(work, ignore_errors=True)  # the model and the runs: the tables below hold what counts

    print(f"\nsamples/step={samples} ({args.prompts} prompts x 5) mini-batches=4 concurrency={args.concurrency} "
          f"latency=U({low.value:.3f}, {high.value:.3f}) s compute/step={compute:.2f} s "
          f"floor target={floor_target:.2f} s steps={args.steps} (mean of steps {WARMUP_STEPS}..{args.steps - 1}) "
          f"model=random Llama h{args.hidden} L{args.layers} machine={platform.machine()} cpus={mp.cpu_count()}")
    if args.save:
        settings = {"prompts": args.prompts, "group_size": 5, "mini_batches": 4, "engine_batches": 4,
                    "concurrency": args.concurrency, "deadline_s": JUDGE_TIMEOUT_S, "steps": args.steps,
                    "warmup_steps": WARMUP_STEPS, "low": low.value, "high": high.value}
        args.save.write_text(json.dumps({"settings": settings, "calibration": calib,
                                         "calibration_behaviour": calib_behaviour, "modes": saved}))
        print(f"saved to {args.save}")
    print("| mode | step s | vs sync | floor s | bound s | step / bound | reward wait s | overlap s | "
          "judge peak in flight | mean reward |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    sync_step = rows[0][1]
    for name, step, floor, wait, overlap, reward, in_flight in rows:
        bound = max(compute, floor)
        print(f"| {name} | {step:.2f} | {step / sync_step - 1:+.1%} | {floor:.2f} | {bound:.2f} | "
              f"{step / bound:.2f} | {wait:.2f} | {overlap:.2f} | {in_flight} | {reward:.3f} |")


if __name__ == "__main__":
    main()
