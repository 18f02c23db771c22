"""The public answer-equivalence corpus (tests/data/math_equivalence.jsonl) and the two checkers run over it:
plain math-verify, as a new user calls it, and rlvr's MathRuleRewardWorker. Shared by the corpus test and
bench/math_equivalence.py.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rlvr.data.types import Prompt, Sample
from rlvr.workers.rewards.base import RewardLimits
from rlvr.workers.rewards.math_rule import MathRuleRewardWorker
from rlvr.workers.rewards.process_pool import KillableProcessPool

CORPUS = Path(__file__).resolve().parents[1] / "data" / "math_equivalence.jsonl"
FIELDS = ("id", "category", "gold", "response", "expected", "source", "why")


@dataclass(frozen=True)
class Case:
    id: str
    category: str
    gold: str
    response: str
    expected: bool
    source: str
    why: str
    derived: str = ""


def load_corpus(path: Path = CORPUS) -> list[Case]:
    """The cases, checked as they load: every field present and typed, ids unique. Errors name the line."""
    cases, seen = [], set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        row = json.loads(line)
        missing = [f for f in FIELDS if f not in row]
        if missing or not isinstance(row["expected"], bool) or row["id"] in seen:
            raise ValueError(f"{path.name} line {number}: missing {missing}, bad 'expected' or repeated id "
                             f"{row.get('id')}")
        seen.add(row["id"])
        cases.append(Case(**row))
    return cases


def plain_math_verify(gold: str, response: str) -> bool:
    """What a new user of math-verify writes: default parse of both strings, then verify (pool worker main thread,
    where its signal-based timeouts work)."""
    import logging

    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # its per-timeout warnings are noise here
    return bool(verify(parse(gold), parse(response)))


def _warm_up_plain() -> None:
    plain_math_verify("1", "1")


async def run_plain(cases: list[Case], pool: KillableProcessPool, timeout_s: float = 600.0) -> dict[str, bool]:
    """Plain math-verify's verdict per case id (all cases submitted at once; the pool runs `size` at a time)."""
    verdicts = await asyncio.gather(
        *(pool.run(plain_math_verify, c.gold, c.response, timeout_s=timeout_s) for c in cases)
    )
    return {c.id: v for c, v in zip(cases, verdicts)}


async def run_rlvr(cases: list[Case], worker: MathRuleRewardWorker) -> dict[str, tuple[str, bool | None]]:
    """rlvr's (status, correct) per case id, through the real reward worker and its process pool."""
    results = await asyncio.gather(*(worker.evaluate(corpus_sample(c)) for c in cases))
    return {c.id: (r.status, r.correct) for c, r in zip(cases, results)}


def make_plain_pool(size: int = 2) -> KillableProcessPool:
    return KillableProcessPool(size, initializer=_warm_up_plain)


def make_rlvr_worker(pool_size: int = 2, verify_timeout_s: float = 5.0) -> MathRuleRewardWorker:
    """The reward as shipped (its default deadlines unless told otherwise). A concurrency of a few calls per pool
    process keeps the queue short: time spent waiting for a pool process counts against each call's deadline."""
    limits = RewardLimits(max_concurrency=4 * pool_size, timeout_s=max(60.0, 4 * verify_timeout_s))
    return MathRuleRewardWorker("math", limits, pool_size=pool_size, verify_timeout_s=verify_timeout_s)


def agreement(cases: list[Case], verdicts: dict[str, bool | None]) -> tuple[Counter, Counter]:
    """(agreed, total) per category."""
    agreed, total = Counter(), Counter()
    for case in cases:
        total[case.category] += 1
        agreed[case.category] += verdicts[case.id] is case.expected
    return agreed, total


def corpus_sample(case: Case) -> Sample:
    prompt = Prompt(uid=case.id, domain="math", ground_truth=case.gold, text="")
    return Sample(
        prompt=prompt, group_id=case.id, index=0, response_ids=[], response_text=case.response, finish_reason="stop",
        policy_version=0,
    )
