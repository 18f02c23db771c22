"""How usable is the local judge's verdict? The real judge server and LLMJudgeRewardWorker over the judge rows.

    .venv/bin/python bench/judge_verdicts.py [--modes yes_no,yes_no_logprobs] [--rows 40] [--threads 1]
    .venv/bin/python bench/judge_verdicts.py --vllm --dtypes float32 bfloat16 --modes yes_no_logprobs

Starts the embedded judge server (the transformers one unless --vllm, on the default model unless --model),
then scores every row of data/mix/judge_{train,val}.jsonl with two kinds of responses:

  correct   the row's reference answer, as a bare answer ("Cairo.") and in a sentence ("The answer is cairo.")
  wrong     the reference answer of another row (a different answer), phrased the same two ways

and prints per mode: the invalid rate (status "invalid" or any other failure), the accuracy on correct and on
wrong responses among the valid verdicts, the overall accuracy of the valid verdicts, and the accuracy with
an invalid verdict counted as a miss (what training sees: an invalid sample gets no gradient). Each mode is a
worker configuration (see MODES); the worker's defaults are used for anything a mode leaves out, so
"yes_no_logprobs" measures the template the worker ships for that mode.

--dtypes starts one server per dtype (vLLM's `--dtype`, or the transformers server's), scores the same samples
on each, and prints for every mode how often each dtype's verdict (and status) agrees with the first dtype's,
with the largest and median change of p_yes (yes_no_logprobs): whether a cheaper judge changes the rewards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlvr.config.cluster import JudgeServerConfig  # noqa: E402
from rlvr.data.types import Prompt, Sample  # noqa: E402
from rlvr.judge_server import start_judge_server  # noqa: E402
from rlvr.workers.rewards.base import RewardLimits  # noqa: E402
from rlvr.workers.rewards.llm_judge import DEFAULT_TEMPLATE, LLMJudgeRewardWorker  # noqa: E402

MODES: dict[str, dict] = {
    # configs/math_code_mix.yaml before this bench: text YES/NO, 8 tokens.
    "yes_no": {"parse_mode": "yes_no", "max_tokens": 8},
    # Token probabilities with the text mode's template (to separate the effect of the template).
    "yes_no_logprobs+default_template": {"parse_mode": "yes_no_logprobs", "prompt_template": DEFAULT_TEMPLATE},
    # Token probabilities with the mode's own template (the worker's default for the mode).
    "yes_no_logprobs": {"parse_mode": "yes_no_logprobs"},
}


def load_rows(limit: int) -> list[dict]:
    rows = []
    for split in ("train", "val"):
        with open(ROOT / "data" / "mix" / f"judge_{split}.jsonl") as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows[:limit]


def sentence(answer: str) -> str:
    words = answer.split()
    if words[0] in ("A", "An", "The"):
        words[0] = words[0].lower()
    else:
        words[0] = words[0].lower() if words[0][1:].islower() else words[0]
    return f"The answer is {' '.join(words)}."


def cases(rows: list[dict]) -> list[tuple[Sample, bool]]:
    """(sample, label) pairs: each row with its own answer (True) and another row's answer (False)."""
    out = []
    for i, row in enumerate(rows):
        other = next(rows[(i + k) % len(rows)]["ground_truth"] for k in range(7, 7 + len(rows))
                     if rows[(i + k) % len(rows)]["ground_truth"].lower() != row["ground_truth"].lower())
        for answer, label in ((row["ground_truth"], True), (other, False)):
            for phrase in (f"{answer}.", sentence(answer)):
                prompt = Prompt(uid=row["id"], domain="judge", ground_truth=row["ground_truth"],
                                messages=row["messages"])
                out.append((Sample(prompt=prompt, group_id=row["id"], index=len(out), response_ids=[],
                                   response_text=phrase, finish_reason="stop", policy_version=0), label))
    return out


async def score_all(worker: LLMJudgeRewardWorker, samples: list[Sample]):
    results = await asyncio.gather(*(worker.evaluate(s) for s in samples))
    await worker.aclose()
    return results


def summarize(name: str, labelled: list[tuple[Sample, bool]], results, seconds: float) -> dict:
    n = len(results)
    invalid = sum(r.status != "ok" for r in results)
    valid = [(r, label) for r, (_, label) in zip(results, labelled) if r.status == "ok"]
    right = {True: 0, False: 0}
    total = {True: 0, False: 0}
    for r, label in valid:
        total[label] += 1
        right[label] += bool(r.correct) == label
    acc_valid = sum(right.values()) / len(valid) if valid else float("nan")
    return {
        "mode": name, "n": n, "invalid": invalid / n,
        "acc_correct": right[True] / total[True] if total[True] else float("nan"),
        "acc_wrong": right[False] / total[False] if total[False] else float("nan"),
        "acc_valid": acc_valid, "acc_all": sum(right.values()) / n, "seconds": seconds,
        "statuses": {s: sum(r.status == s for r in results) for s in {r.status for r in results}},
        "example_info": [r.info[:160] for r in results[:2]],
    }


def print_agreement(verdicts: dict[str, dict[str, list]], modes: list[str]) -> None:
    """Per mode and dtype: the share of samples whose (status, correct) equals the first dtype's, and how far
    p_yes moved where both have one."""
    first, *others = verdicts
    print(f"\n| mode | dtype | same verdict as {first} | same status | p_yes change, median / max |")
    print("|---|---|---|---|---|")
    for name in modes:
        base = verdicts[first][name]
        for dtype in others:
            results = verdicts[dtype][name]
            same = sum((a.status, bool(a.correct)) == (b.status, bool(b.correct)) for a, b in zip(base, results))
            status = sum(a.status == b.status for a, b in zip(base, results))
            moves = [abs(a.parts["p_yes"] - b.parts["p_yes"]) for a, b in zip(base, results)
                     if "p_yes" in a.parts and "p_yes" in b.parts]
            move = f"{statistics.median(moves):.4f} / {max(moves):.4f}" if moves else "-"
            print(f"| {name} | {dtype} | {same}/{len(base)} ({same / len(base):.1%}) | {status}/{len(base)} | {move} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {list(MODES)}")
    parser.add_argument("--rows", type=int, default=40, help="judge rows to use (train then val; 40 in all)")
    parser.add_argument("--model", default=None, help="judge model directory (default: the embedded default)")
    parser.add_argument("--threads", type=int, default=1, help="the transformers server's torch threads")
    parser.add_argument("--vllm", action="store_true", help="prefer vLLM's server when installed")
    parser.add_argument("--dtypes", nargs="+", default=None,
                        help="one server per dtype (e.g. float32 bfloat16); agreement with the first is printed")
    parser.add_argument("--json", default=None, help="also write the table as JSON here")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown modes {unknown}; known: {list(MODES)}")
    model = args.model
    if model is None:
        from rlvr.models.default_model import ensure_default_model

        model = ensure_default_model()
    labelled = cases(load_rows(args.rows))
    samples = [s for s, _ in labelled]
    print(f"{len(samples)} samples ({sum(label for _, label in labelled)} correct responses) from "
          f"{args.rows} rows; starting the judge server on {model}", flush=True)
    rows = []
    verdicts: dict[str, dict[str, list]] = {}  # dtype -> mode -> results
    for dtype in args.dtypes or [None]:
        vllm_args, server_args = JudgeServerConfig(dtype=dtype, threads=args.threads).backend_args()
        with start_judge_server(model, prefer_vllm=args.vllm, startup_timeout_s=600, vllm_args=vllm_args,
                                server_args=server_args) as handle:
            print(f"judge server: {handle.backend} at {handle.url}" + (f", dtype {dtype}" if dtype else ""),
                  flush=True)
            for name in modes:
                worker = LLMJudgeRewardWorker("judge", RewardLimits(max_concurrency=16, timeout_s=600,
                                                                    max_retries=0),
                                              base_url=handle.url, request_timeout_s=600, **MODES[name])
                started = time.perf_counter()
                results = asyncio.run(score_all(worker, samples))
                label = name if dtype is None else f"{name} ({dtype})"
                rows.append(summarize(label, labelled, results, time.perf_counter() - started))
                verdicts.setdefault(str(dtype), {})[name] = results
                row = rows[-1]
                print(f"  {label}: invalid {row['invalid']:.1%}, {row['seconds']:.0f}s; e.g. {row['example_info']}",
                      flush=True)
    print()
    print(f"| mode | samples | invalid | acc. on correct | acc. on wrong | acc. (valid) | acc. (invalid = miss) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['n']} | {r['invalid']:.1%} | {r['acc_correct']:.1%} | {r['acc_wrong']:.1%} "
              f"| {r['acc_valid']:.1%} | {r['acc_all']:.1%} |")
    if len(verdicts) > 1:
        print_agreement(verdicts, modes)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
