"""The public answer-equivalence corpus (tests/data/math_equivalence.jsonl) through plain math-verify and through
rlvr's math reward, side by side.

    flock /tmp/rlvr-heavy.lock .venv/bin/python bench/math_equivalence.py [--reps 3] [--pool-size 2]
        [--verify-timeout 5]

  plain  what a new user writes: `verify(parse(gold), parse(response))`, math-verify's defaults, in a
         KillableProcessPool of `--pool-size` processes (its signal-based timeouts need a main thread).
  rlvr   MathRuleRewardWorker as shipped (pool_size=`--pool-size`, verify_timeout_s=`--verify-timeout`): answer
         extraction, normalization, exact/percent/interval comparisons over math-verify, in its killable pool.

Printed: one table per category (agreed / total with the expected verdict, for each), the overall agreement, the
cases where either disagrees with the expected verdict, checks per second (every case submitted at once; median
[min, max] over `--reps` runs, the two variants alternating which goes first, with rlvr's timeout statuses per rep),
and the time each pathological input takes to end as a status. Warm-up (each pool process imports sympy and
math-verify) is outside the timed part. Verdicts come from a separate pass in which rlvr has a generous deadline
(a timeout on a loaded machine is a masked status, not a verdict). The load average is printed before and after:
on a shared machine the ratio holds, absolute rates do not.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers.math_corpus import (  # noqa: E402
    Case,
    agreement,
    corpus_sample,
    load_corpus,
    make_plain_pool,
    make_rlvr_worker,
    run_plain,
    run_rlvr,
)

VERDICT_TIMEOUT_S = 120.0

PATHOLOGICAL = {
    "power tower \\boxed{9^{9^{9^{9}}}}": "\\boxed{9^{9^{9^{9}}}}",
    "100 KB of nested braces in a box": "\\boxed{" + "{" * 50_000 + "1" + "}" * 50_000 + "}",
    "invalid UTF-8 (surrogate escapes)": b"\xff\xfe \\boxed{1} \x80".decode("utf-8", "surrogateescape"),
    "empty response": "",
}


async def measure(cases: list[Case], reps: int, pool_size: int, verify_timeout_s: float) -> dict:
    """Throughput reps with the reward as shipped, then one verdict pass per variant. The verdict pass gives rlvr a
    generous deadline: on a loaded machine a slow sympy comparison is a `timeout` status (masked, counted), which
    says nothing about the verdict; those are counted in the throughput table instead."""
    plain_pool = make_plain_pool(pool_size)
    worker = make_rlvr_worker(pool_size, verify_timeout_s)
    try:
        # Warm-up: both pools' processes import sympy and math-verify before the clock runs.
        await asyncio.gather(run_plain(cases[: 2 * pool_size], plain_pool), run_rlvr(cases[: 2 * pool_size], worker))
        rates: dict[str, list[float]] = {"plain": [], "rlvr": []}
        timeouts: list[int] = []
        for rep in range(reps):
            for variant in (("plain", "rlvr") if rep % 2 == 0 else ("rlvr", "plain")):
                start = time.perf_counter()
                if variant == "plain":
                    await run_plain(cases, plain_pool)
                else:
                    statuses = await run_rlvr(cases, worker)
                    timeouts.append(sum(status == "timeout" for status, _ in statuses.values()))
                rates[variant].append(len(cases) / (time.perf_counter() - start))
        pathological = []
        for name, text in PATHOLOGICAL.items():
            start = time.perf_counter()
            result = await worker.evaluate(corpus_sample(Case(name, "", "1", text, False, "", "")))
            pathological.append((name, result.status, time.perf_counter() - start))
    finally:
        worker.close()
    verdict_worker = make_rlvr_worker(pool_size, VERDICT_TIMEOUT_S)
    try:
        statuses = await run_rlvr(cases, verdict_worker)
        plain = await run_plain(cases, plain_pool)
    finally:
        verdict_worker.close()
        plain_pool.close()
    return {"rates": rates, "timeouts": timeouts, "plain": plain, "statuses": statuses, "pathological": pathological}


def show(value: bool | None) -> str:
    return {True: "correct", False: "incorrect", None: "no verdict"}[value]


def report(cases: list[Case], out: dict, args: argparse.Namespace, load_before: tuple, load_after: tuple) -> None:
    plain = out["plain"]
    rlvr = {cid: correct for cid, (_, correct) in out["statuses"].items()}
    plain_agreed, total = agreement(cases, plain)
    rlvr_agreed, _ = agreement(cases, rlvr)
    print(f"\nanswer-equivalence corpus: {len(cases)} cases (tests/data/math_equivalence.jsonl), "
          f"{sum(not c.expected for c in cases)} of them must be judged wrong")
    print("\n| category | cases | plain math-verify agreed | rlvr agreed |")
    print("|---|---|---|---|")
    for category in total:
        print(f"| {category} | {total[category]} | {plain_agreed[category]} / {total[category]} | "
              f"{rlvr_agreed[category]} / {total[category]} |")
    n, p, r = len(cases), sum(plain_agreed.values()), sum(rlvr_agreed.values())
    print(f"| **all** | {n} | **{p} / {n} ({100 * p / n:.1f}%)** | **{r} / {n} ({100 * r / n:.1f}%)** |")
    lost = [c.id for c in cases if plain[c.id] is c.expected and rlvr[c.id] is not c.expected]
    print(f"\ncases plain math-verify gets right and rlvr gets wrong: {len(lost)} {lost or ''}")
    not_ok = {cid: status for cid, (status, _) in out["statuses"].items() if status != "ok"}
    print(f"rlvr statuses other than ok (verdict pass, verify_timeout_s={VERDICT_TIMEOUT_S:g}): {len(not_ok)} "
          f"{not_ok or ''}")

    print("\ndisagreements with the expected verdict:\n")
    print("| case | category | expected | plain | rlvr | why the expected verdict |")
    print("|---|---|---|---|---|---|")
    for c in cases:
        if plain[c.id] is not c.expected or rlvr[c.id] is not c.expected:
            print(f"| {c.id} | {c.category} | {show(c.expected)} | {show(plain[c.id])} | {show(rlvr[c.id])} | "
                  f"{c.why[:110]} |")

    rates = out["rates"]
    base = statistics.median(rates["plain"])
    print(f"\nchecks per second, {args.reps} reps, pool_size={args.pool_size}, every case submitted at once; "
          f"median [min, max]:\n")
    print("| variant | checks / s | vs plain | timeout statuses per rep |")
    print("|---|---|---|---|")
    for variant in ("plain", "rlvr"):
        r = rates[variant]
        note = ", ".join(map(str, out["timeouts"])) if variant == "rlvr" else "not reported (a silent False)"
        print(f"| {variant} | {statistics.median(r):.1f} [{min(r):.1f}, {max(r):.1f}] | "
              f"{statistics.median(r) / base:.2f}x | {note} |")
    print(f"\npathological inputs through rlvr (verify_timeout_s={args.verify_timeout}, soft deadline "
          f"{args.verify_timeout / 2:g} s):\n")
    print("| input | status | seconds |")
    print("|---|---|---|")
    for name, status, seconds in out["pathological"]:
        print(f"| {name} | {status} | {seconds:.2f} |")
    print(f"\nsetup: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"math-verify {version('math-verify')}, sympy {version('sympy')}; load average (1/5/15 min) before "
          f"{'/'.join(f'{x:.1f}' for x in load_before)}, after {'/'.join(f'{x:.1f}' for x in load_after)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--pool-size", type=int, default=2)
    parser.add_argument("--verify-timeout", type=float, default=5.0, help="rlvr's verify_timeout_s (hard deadline)")
    args = parser.parse_args()
    cases = load_corpus()
    load_before = os.getloadavg()
    out = asyncio.run(measure(cases, args.reps, args.pool_size, args.verify_timeout))
    report(cases, out, args, load_before, os.getloadavg())


if __name__ == "__main__":
    main()
