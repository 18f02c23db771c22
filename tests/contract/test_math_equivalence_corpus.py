"""The math reward against the public answer-equivalence corpus (tests/data/math_equivalence.jsonl): it agrees with
the expected verdict on at least 99% of the cases, and on every case plain math-verify gets right.

Both run for real, side by side: rlvr through MathRuleRewardWorker and its process pool (2 workers), plain
math-verify (`verify(parse(gold), parse(response))`) in a process pool of its own.
"""

import asyncio
import re
from collections import Counter

import pytest

from tests.helpers.math_corpus import (
    agreement,
    load_corpus,
    make_plain_pool,
    make_rlvr_worker,
    run_plain,
    run_rlvr,
)

MIN_AGREEMENT = 0.99


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


@pytest.fixture(scope="module")
def verdicts(corpus):
    # Generous deadlines: this test is about verdicts, and a shared CI machine can be slow. The deadlines
    # themselves are tested in test_math_rule_reward.py.
    worker, pool = make_rlvr_worker(pool_size=2, verify_timeout_s=120), make_plain_pool(size=2)

    async def both():
        return await asyncio.gather(run_rlvr(corpus, worker), run_plain(corpus, pool))

    try:
        rlvr, plain = asyncio.run(both())
    finally:
        worker.close()
        pool.close()
    return rlvr, plain


def test_corpus_is_large_sourced_and_covers_both_verdicts(corpus):
    assert len(corpus) >= 250
    # A source is a file at a commit ("github:owner/repo/path@<sha>") or a GitHub issue / pull request.
    sourced = re.compile(r"github:[^/\s]+/[^/\s]+/\S+@[0-9a-f]{40}|https://github\.com/[^/]+/[^/]+/(issues|pull)/\d+$")
    assert [case.id for case in corpus if not sourced.match(case.source)] == []
    assert all(case.why.strip() for case in corpus)
    per_category = Counter((case.category, case.expected) for case in corpus)
    categories = {case.category for case in corpus}
    # Every category holds answers that must be judged right and answers that must be judged wrong.
    assert all(per_category[(c, True)] and per_category[(c, False)] for c in categories - {"distractors"})
    assert per_category[("distractors", False)] >= 5


def test_every_case_gets_a_status_ok(corpus, verdicts):
    rlvr, _ = verdicts
    failed = {cid: status for cid, (status, _) in rlvr.items() if status != "ok"}
    assert not failed, failed


def test_rlvr_agrees_with_the_expected_verdict_on_99_percent(corpus, verdicts):
    rlvr, _ = verdicts
    agreed, total = agreement(corpus, {cid: correct for cid, (_, correct) in rlvr.items()})
    wrong = [c.id for c in corpus if rlvr[c.id][1] is not c.expected]
    assert sum(agreed.values()) >= MIN_AGREEMENT * len(corpus), wrong


def test_never_worse_than_plain_math_verify(corpus, verdicts):
    rlvr, plain = verdicts
    lost = [c.id for c in corpus if plain[c.id] is c.expected and rlvr[c.id][1] is not c.expected]
    assert not lost, lost


def test_lists_with_an_ellipsis_plain_math_verify_accepts_are_rejected(corpus, verdicts):
    """The category math-verify wrongly accepts (Math-Verify issue 14): lists that share first terms."""
    rlvr, plain = verdicts
    cases = [c for c in corpus if c.category == "ellipsis_lists"]
    fooled = [c.id for c in cases if not c.expected and plain[c.id]]
    assert len(fooled) >= 2, fooled
    assert [c.id for c in cases if rlvr[c.id][1] is not c.expected] == []
