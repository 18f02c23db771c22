"""The asynchronous-reward recipe at its own scale, in simulated time, and the simulator checked against a
measured run.

    .venv/bin/python bench/async_at_scale.py                       # the recipe's scale, every overlap mode
    .venv/bin/python bench/async_reward.py --save /tmp/measured.json
    .venv/bin/python bench/async_at_scale.py --measured /tmp/measured.json   # simulation vs measurement

The simulator (rlvr/sim) runs rlvr's own driver loop, schedulers, reward agent and overlap code over simulated
durations on a virtual clock, so a step of 1,024 prompts x 5 samples with 256 reward calls in flight takes
seconds of wall time instead of minutes of GPU time.

Scale tables. The recipe (verl reward agent, KaLM team): GRPO, 1,024 prompts x 5 samples, 4 mini-batches, 256
concurrent reward calls of 1-40 s, ~250 s of GPU work per step, sync vs overlapped: -30.85%. Here the 250 s
are split as weight sync 5 s + generation 120 s + training 125 s in every mode (the synchronous loop's extra
old-logprob pass is left out, which favours sync), reward.timeout_s = 120 s. Latencies: U(1, 40) s, and heavy
tails: lognormal bodies with the same mean (20.5 s) plus 1% stragglers at 20x the mean (410 s), which the
deadline cuts at 120 s (a timeout: the sample is masked). The bound is max(compute, samples x E[min(latency,
deadline)] / concurrency). Steps 2..N-2 are averaged: the first two warm up (off-policy starts two rollouts),
and off-policy's last step has no next rollout to generate.

Agreement. `--measured` takes bench/async_reward.py's saved run (its settings, every step's metrics and the
latencies its stand-in judge drew, per mode) and simulates each mode at those settings: compute phases are the
calibration run's means (weight sync, generation, the old-logprob pass, batching + advantages + training; a second
calibration with behaviour logprobs gives what generation costs more in the modes that anchor on them), each
mode replays the latencies its judge drew in call order plus the transport overhead (worker-side mean latency -
judge-side mean draw, from the sync run: overlapped runs log reward latencies per step over calls that finished
in the step, which the mean of step means weighs unevenly). The step times, averaged over the same steps, must agree
within 5%.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlvr.sim.latency import LatencyModel  # noqa: E402
from rlvr.sim.pipeline import DOMAIN, OVERLAP_MODES, SimSpec, simulate, steady  # noqa: E402

RECIPE_CUT = -0.3085  # the recipe's step time, overlapped vs sync
AGREEMENT = 0.05
MEAN_LATENCY_S = 20.5  # U(1, 40)'s mean; the heavy-tailed bodies keep it

DISTRIBUTIONS = {
    "U(1, 40)": LatencyModel("uniform", low=1.0, high=40.0),
    "lognormal s=1 + 1% x20": LatencyModel("lognormal", mean=MEAN_LATENCY_S, sigma=1.0, straggler_frac=0.01,
                                           straggler_factor=20.0),
    "lognormal s=1.5 + 1% x20": LatencyModel("lognormal", mean=MEAN_LATENCY_S, sigma=1.5, straggler_frac=0.01,
                                             straggler_factor=20.0),
}


def recipe_spec(latency: LatencyModel, steps: int, seed: int) -> SimSpec:
    return SimSpec(prompts_per_step=1024, group_size=5, mini_batches=4, concurrency=256, latency=latency,
                   model_update_s=5.0, generate_s=120.0, train_s=125.0, deadline_s=120.0, steps=steps, seed=seed)


# ---------------------------------------------------------------------------------------------------- scale
def scale_table(name: str, latency: LatencyModel, steps: int, seed: int) -> list[dict]:
    spec = recipe_spec(latency, steps, seed)
    rows = []
    for mode_name, mode in OVERLAP_MODES.items():
        t0 = time.perf_counter()
        records = simulate(spec, mode)
        window = [r for r in records if spec.warmup_steps <= r["step"] < spec.steps - 1]
        rows.append({"mode": mode_name, "step": steady(records, spec, "time/step", drop_last=True),
                     "bound": spec.bound(mode),
                     "wait": steady(records, spec, "time/reward_wait", drop_last=True),
                     "timeouts": sum(r.get(f"{DOMAIN}/reward/status/timeout", 0.0) for r in window),
                     "samples": sum(r["batch/samples"] for r in window),
                     "staleness": max(r["batch/staleness/max"] for r in records),
                     "wall": time.perf_counter() - t0})
    sync = rows[0]["step"]
    print(f"\n### {name}: {latency.describe()}, deadline {spec.deadline_s:.0f} s\n")
    compute = spec.compute(OVERLAP_MODES["both"])
    print(f"samples/step={spec.samples} ({spec.prompts_per_step} x {spec.group_size}) mini-batches="
          f"{spec.mini_batches} concurrency={spec.concurrency} compute/step={compute:.0f} s "
          f"E[min(latency, deadline)]={latency.expected(spec.deadline_s):.2f} s floor={spec.floor:.1f} s "
          f"steps={spec.steps} (mean of steps {spec.warmup_steps}..{spec.steps - 2}) seed={seed}\n")
    print("| mode | step s | vs sync | bound s | step / bound | reward wait s | timeouts (masked) | staleness max "
          "| wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['step']:.1f} | {r['step'] / sync - 1:+.1%} | {r['bound']:.1f} | "
              f"{r['step'] / r['bound']:.3f} | {r['wait']:.1f} | {r['timeouts']:.0f} / {r['samples']:.0f} | "
              f"{r['staleness']:.0f} | {r['wall']:.1f} |")
    return rows


# ---------------------------------------------------------------------------------------------------- agreement
def measured_spec(saved: dict, name: str) -> SimSpec:
    """The simulation of bench/async_reward.py's run of mode `name` at that run's settings."""
    s, calib, run = saved["settings"], saved["calibration"], saved["modes"][name]

    def phase(*keys: str, records: list[dict] = calib) -> float:
        return sum(_steady_mean(records, f"time/{k}", s["warmup_steps"]) for k in keys)

    behaviour = saved.get("calibration_behaviour") or calib

    sync = saved["modes"]["sync"]  # there each step's reward metrics cover exactly its own calls
    offset = (_steady_mean(sync["records"], f"{DOMAIN}/reward/latency/mean", 0)
              - sum(sync["draws"]) / len(sync["draws"]))
    return SimSpec(prompts_per_step=s["prompts"], group_size=s["group_size"], mini_batches=s["mini_batches"],
                   engine_batches=s["engine_batches"], concurrency=s["concurrency"], deadline_s=s["deadline_s"],
                   steps=s["steps"], warmup_steps=s["warmup_steps"],
                   latency=LatencyModel("uniform", low=s["low"], high=s["high"], offset_s=max(offset, 0.0)),
                   model_update_s=phase("model_update"), generate_s=phase("generate"),
                   behaviour_logprobs_s=max(0.0, phase("generate", records=behaviour) - phase("generate")),
                   old_logprobs_s=phase("forwards"), train_s=phase("batch", "advantages", "train"),
                   replay_latencies=tuple(run["draws"]))


def _steady_mean(records: list[dict], key: str, warmup: int) -> float:
    values = [r[key] for r in records if key in r and r["step"] >= warmup]
    return sum(values) / len(values) if values else 0.0


def agreement_table(path: Path) -> bool:
    saved = json.loads(path.read_text())
    s = saved["settings"]
    print(f"\n### Simulation vs measurement: {path}\n")
    print(f"samples/step={s['prompts'] * s['group_size']} concurrency={s['concurrency']} "
          f"latency=U({s['low']:.3f}, {s['high']:.3f}) s steps={s['steps']} "
          f"(mean of steps {s['warmup_steps']}..{s['steps'] - 1}, as measured)")
    p = measured_spec(saved, "sync")
    print(f"calibrated seconds per step: weight sync {p.model_update_s:.2f}, generation {p.generate_s:.2f} "
          f"(+{p.behaviour_logprobs_s:.2f} with behaviour logprobs), old-logprob pass {p.old_logprobs_s:.2f}, "
          f"training {p.train_s:.2f}\n")
    print("| mode | measured step s | simulated step s | simulated / measured | measured reward wait s | "
          "simulated reward wait s | transport overhead ms |")
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    for name, mode in OVERLAP_MODES.items():
        spec = measured_spec(saved, name)
        measured = saved["modes"][name]["records"]
        records = simulate(spec, mode)
        m_step, s_step = _steady_mean(measured, "time/step", s["warmup_steps"]), steady(records, spec, "time/step")
        m_wait = _steady_mean(measured, "time/reward_wait", s["warmup_steps"])
        worst = max(worst, abs(s_step / m_step - 1))
        print(f"| {name} | {m_step:.2f} | {s_step:.2f} | {s_step / m_step:.3f} | {m_wait:.2f} | "
              f"{steady(records, spec, 'time/reward_wait'):.2f} | {spec.latency.offset_s * 1000:.0f} |")
    ok = worst <= AGREEMENT
    print(f"\nlargest disagreement {worst:.1%} (target {AGREEMENT:.0%}): {'agree' if ok else 'DISAGREE'}")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--measured", type=Path, help="bench/async_reward.py --save's file: simulate its settings")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.measured:
        sys.exit(0 if agreement_table(args.measured) else 1)
    verdicts = []
    for name, latency in DISTRIBUTIONS.items():
        rows = {r["mode"]: r for r in scale_table(name, latency, args.steps, args.seed)}
        best = rows["streaming"]
        verdicts.append((name, best["step"] / best["bound"], best["step"] / rows["sync"]["step"] - 1))
    print("\n### Goals: streaming (pipeline + off-policy + streaming rewards) within 1.05x of the bound, and at "
          f"least the recipe's {RECIPE_CUT:+.2%} against sync\n")
    print("| latency | step / bound | vs sync | within 1.05x | beats the recipe |")
    print("|---|---|---|---|---|")
    for name, ratio, cut in verdicts:
        print(f"| {name} | {ratio:.3f} | {cut:+.1%} | {'yes' if ratio <= 1.05 else 'no'} | "
              f"{'yes' if cut <= RECIPE_CUT else 'no'} |")


if __name__ == "__main__":
    main()
