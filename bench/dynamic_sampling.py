"""Dynamic sampling policies on one simulated reward distribution, side by side.

    .venv/bin/python bench/dynamic_sampling.py [--steps 30] [--quota 32] [--group 8] [--budget 12000] [--reps 3]

Each prompt gets a fixed success probability p ~ Beta(a, b) (U-shaped by default: most prompts are almost always
or almost never solved, as for a small model on mixed-difficulty data), and each of its samples is correct with
probability p. The real DynamicSamplingScheduler runs on a fake instant engine (generation is not the point) for:

  rlvr          zero-spread filter, refill exactly the shortfall, tail oversampling, surplus carried over
  discard       zero-spread filter, refill a whole quota per round, surplus thrown away (verl's policy)
  no_filter     every group kept (zero-advantage groups included)

Printed per policy (median over reps, [min, max]): samples generated per kept sample (aborted generations count as
generated, conservatively), steps completed within a sample budget, and useful samples per step (samples in groups
whose rewards vary, i.e. with a non-zero GRPO advantage).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlvr.config.load import config_from_dict  # noqa: E402
from rlvr.schedulers.dynamic_sampling import DynamicSamplingScheduler  # noqa: E402
from tests.helpers.fakes import (FakeInferWorkerForTest, LocalHandle, RewardHandleForTest,  # noqa: E402
                                 ScriptedRewardForTest, prompt)

POLICIES = {
    "rlvr": {"filter": {"zero_spread": True}, "refill": "shortfall", "carry_over": True, "oversample_frac": 0.25},
    "discard": {"filter": {"zero_spread": True}, "refill": "full_batch", "carry_over": False},
    "no_filter": {},
}


def make_prompts(n: int, group: int, a: float, b: float, seed: int):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        p = rng.beta(a, b)
        out.append(prompt(f"p{i}", [int(x) for x in rng.random(group) < p], gen_delay_ms=0))
    return out


async def run_policy(policy: dict, prompts, args) -> dict[str, float]:
    cfg = config_from_dict({"data": {"train_files": ["unused"]},
                            "domains": {"d": {"reward": {"worker": "tests.helpers.fakes.ScriptedRewardForTest"}}},
                            "rollout": {"group_size": args.group, "max_refill_rounds": 50, **policy}})
    infer = FakeInferWorkerForTest(cap=10_000)
    reward = RewardHandleForTest(ScriptedRewardForTest("d"))
    scheduler = DynamicSamplingScheduler("d", prompts, [], [LocalHandle(infer)], [LocalHandle(reward)], cfg)
    generated = kept = useful = steps = 0
    for step in range(args.steps):
        groups, m = await scheduler.get_batch(args.quota, step, step)
        await asyncio.sleep(0)  # let background scoring land in the carry-over buffer
        generated += m.get("d/scheduler/samples_generated", 0) + m.get("d/scheduler/aborted", 0) * args.group
        if generated > args.budget:
            break
        if len(groups) == args.quota:
            steps += 1
        kept += sum(len(g.samples) for g in groups)
        useful += sum(len(g.samples) for g in groups if len({s.reward.reward for s in g.samples}) > 1)
    return {"gen_per_kept": generated / max(kept, 1), "steps": steps, "useful_per_step": useful / max(steps, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--quota", type=int, default=32)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--budget", type=int, default=12_000, help="samples the generator may produce")
    parser.add_argument("--beta", type=float, nargs=2, default=(0.4, 0.6))
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()

    results: dict[str, list[dict]] = {name: [] for name in POLICIES}
    for rep in range(args.reps):
        prompts = make_prompts(20_000, args.group, *args.beta, seed=rep)
        for name, policy in POLICIES.items():
            results[name].append(asyncio.run(run_policy(policy, prompts, args)))

    def cell(name: str, key: str) -> str:
        values = [r[key] for r in results[name]]
        return f"{statistics.median(values):.2f} [{min(values):.2f}, {max(values):.2f}]"

    base = statistics.median(r["gen_per_kept"] for r in results["discard"])
    print(f"\nsimulated: p ~ Beta{tuple(args.beta)}, group {args.group}, quota {args.quota} groups/step, "
          f"budget {args.budget} samples, up to {args.steps} steps, {args.reps} reps; "
          f"machine {platform.machine()}, python {platform.python_version()}")
    print("| policy | generated per kept sample | vs discard | steps completed | useful samples / step |")
    print("|---|---|---|---|---|")
    for name in POLICIES:
        ratio = statistics.median(r["gen_per_kept"] for r in results[name]) / base
        print(f"| {name} | {cell(name, 'gen_per_kept')} | {ratio:.2f}x | {cell(name, 'steps')} | "
              f"{cell(name, 'useful_per_step')} |")


if __name__ == "__main__":
    main()
