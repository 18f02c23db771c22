"""Worker faults on the default model: each fault injected several times into one run, and one table.

    flock /tmp/rlvr-heavy.lock .venv/bin/python bench/chaos.py [--config configs/math_code_mix.yaml] [--repeats 3]
        [--faults actor_infer,reward,sandbox,judge,scheduler] [key=value ...]

One training run of `--config` (math, code and judge domains: vLLM generation, DeepSpeed, the sandbox and the
local judge server), shortened to one step per injection, plus a warm-up step and a last step. From step 1 on, each step gets one
fault, the fault types in turn, `--repeats` rounds: a real SIGKILL (tests/chaos/injector.py) of

    actor_infer  the actor_infer worker            reward     the reward actor of --reward-domain (judge)
    sandbox      the code reward's sandbox server  judge      the local judge server
    scheduler    the scheduler of --scheduler-domain (math)

sent while the target has requests in flight. Per fault type:

    injected           SIGKILLs sent (busy: with requests in flight at that moment)
    survived           the step completed and the target served again (a new process)
    steps lost         steps of those injections that were never logged (the run stopped)
    samples lost       samples of the step that never reached the trainer, or came back with a failed reward
                       (status error or timeout: masked); the row "none" is the warm-up step, for comparison
    duplicated         prompts trained twice (the run stays inside one epoch of every domain) and steps logged twice
    recover s          from the kill to the replacement serving (actor_infer: with the current weights), median
                       [min-max]
    orphans            processes the killed one had started still alive 10 s after its replacement served

The judge's reward retries are widened (`domains.judge.reward.max_retries=8`, backoff 0.5 s doubling: two
minutes) so that requests cut by a judge restart are retried until the restarted judge answers; pass your own
value to see the default's behaviour. Nothing here asserts times; tests/chaos checks the same faults in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlvr.config.load import load_config  # noqa: E402
from rlvr.pipeline.faults import RunStopped  # noqa: E402
from tests.chaos.injector import FAULTS, Injector, RecordingPipeline  # noqa: E402

FAILED = ("error", "timeout")  # reward statuses a fault may cause ("invalid" is the judge's own verdict problem)


def plan_for(faults: list[str], repeats: int, reward_domain: str, scheduler_domain: str) -> list[tuple]:
    domain = {"reward": reward_domain, "sandbox": "code", "judge": "judge", "scheduler": scheduler_domain}
    return [(f, domain.get(f), 1 + r * len(faults) + i) for r in range(repeats) for i, f in enumerate(faults)]


def step_losses(record: dict | None, expected: int, domains: list[str]) -> int:
    """Samples of a step that never reached the trainer, or whose reward failed."""
    if record is None:
        return expected
    failed = sum(record.get(f"{d}/reward/status/{s}", 0) for d in domains for s in FAILED)
    return int(expected - record.get("batch/samples", 0) + failed)


def summarize(pipeline: RecordingPipeline, injections: list, records: list[dict], expected: int) -> list[list[str]]:
    domains = list(pipeline.cfg.domains)
    steps = Counter(r["step"] for r in records if "batch/samples" in r)
    by_step = {r["step"]: r for r in records if "batch/samples" in r}
    uids = Counter(u for us in pipeline.trained.values() for u in us)
    twice = {u for u, n in uids.items() if n > 1}
    rows = [["none (warm-up step)", "-", "-", "0" if 0 in by_step else "1",
             str(step_losses(by_step.get(0), expected, domains)), "-", "-", "-"]]
    for fault in dict.fromkeys(i.fault for i in injections):
        mine = [i for i in injections if i.fault == fault]
        survived = sum(i.step in by_step and i.recover_s is not None for i in mine)
        dup = sum(steps[i.step] - 1 for i in mine if steps[i.step] > 1)
        dup += sum(u in twice for i in mine for u in pipeline.trained.get(i.step, []))
        times = sorted(i.recover_s for i in mine if i.recover_s is not None)
        rec = (f"{statistics.median(times):.1f} [{times[0]:.1f}-{times[-1]:.1f}]" if times else "-")
        rows.append([fault, f"{len(mine)} ({sum(i.busy for i in mine)} busy)", str(survived),
                     str(sum(i.step not in by_step for i in mine)),
                     str(sum(step_losses(by_step.get(i.step), expected, domains) for i in mine)), str(dup), rec,
                     str(sum(len(i.orphans) for i in mine))])
    return rows


def print_table(rows: list[list[str]]) -> None:
    head = ["fault", "injected", "survived", "steps lost", "samples lost", "duplicated", "recover s", "orphans"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, ["-" * w for w in widths], *rows]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(REPO / "configs/math_code_mix.yaml"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--reward-domain", default="judge")
    parser.add_argument("--scheduler-domain", default="math")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    faults = args.faults.split(",")
    plan = plan_for(faults, args.repeats, args.reward_domain, args.scheduler_domain)
    out = tempfile.mkdtemp(prefix="rlvr-chaos-")
    defaults = [f"run.max_steps={2 + len(plan)}", "run.eval_every=0", "run.save_every=0", f"run.output_dir={out}",
                "run.progress_bar=false", "trackers.wandb=false", "trackers.tensorboard=false",
                "rollout.prompts_per_step=4", "generation.max_new_tokens=64", "domains.judge.reward.max_retries=8"]
    cfg = load_config(args.config, defaults + args.overrides)
    expected = cfg.rollout.prompts_per_step * cfg.rollout.group_size
    started = time.monotonic()
    pipeline = RecordingPipeline(cfg)
    injector = Injector(pipeline, plan, busy_timeout_s=120, recover_timeout_s=900)
    pipeline.before_step = injector.wait_settled  # one fault at a time: the next step waits for the last recovery
    stopped = None
    injector.start()
    try:
        pipeline.run()
    except RunStopped as err:
        stopped = err
    finally:
        injector.join(timeout=300)  # the last recovery is measured before the pipeline goes away
        injector.stop()
        pipeline.close()
    records = [json.loads(x) for x in (pipeline.run_dir / "metrics.jsonl").read_text().splitlines()]
    c = pipeline.cfg
    print(f"\nbench/chaos.py: {args.config}, model {c.model.path}, {c.generation.engine} generation, "
          f"{c.actor_train.strategy} training, judge server {'vLLM' if c.judge_server.prefer_vllm else 'transformers'}"
          f"; {c.rollout.prompts_per_step} prompts x {c.rollout.group_size} samples per step, max_new_tokens "
          f"{c.generation.max_new_tokens}; {len(plan) + 1} steps, {args.repeats} rounds of {faults}; "
          f"{platform.node()} ({platform.machine()}, {os.cpu_count()} cores); "
          f"{time.monotonic() - started:.0f} s in all")
    print_table(summarize(pipeline, injector.injections, records, expected))
    failed = Counter()
    for r in records:
        failed.update({f"{d}/{st}": int(r.get(f"{d}/reward/status/{st}", 0)) for d in c.domains for st in FAILED})
    print(f"\nfailed rewards over the run, by domain and status: {dict(+failed) or 'none'}")
    if stopped is not None:
        print(f"\nthe run stopped: {stopped}")
    if injector.errors:
        print("\ninjector errors:\n  " + "\n  ".join(injector.errors))
    events = (pipeline.run_dir / "faults.jsonl")
    if events.exists():
        print("\nrecoveries the driver saw (faults.jsonl): " + ", ".join(
            f"{e['component']} {e['event']} {e['seconds']}s" for e in map(json.loads, events.read_text().splitlines())))
    shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
