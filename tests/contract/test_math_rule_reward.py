"""MathRuleRewardWorker end to end: extraction, the checker in the process pool, its deadlines, and pathological
inputs (each must end as a status within the deadline, through the real worker and pool)."""

import asyncio
import time

import pytest

from rlvr.data.types import Prompt, Sample
from rlvr.workers.rewards.math_rule import MathRuleRewardWorker

HANGS_SYMPY = r"\boxed{9^{9^{9^{9}}}}"  # sympy tries to evaluate it exactly: hours


def make_sample(text, ground_truth):
    prompt = Prompt(uid="p0", domain="math", ground_truth=ground_truth, text="q")
    return Sample(
        prompt=prompt, group_id="g0", index=0, response_ids=[], response_text=text, finish_reason="stop",
        policy_version=0,
    )


@pytest.fixture(scope="module")
def worker():
    # verify_timeout_s=3: the checker's own deadline fires after 1.5 s, the pool's hard deadline after 3 s.
    worker = MathRuleRewardWorker("math", verify_timeout_s=3.0)
    yield worker
    worker.close()


def score(worker, text, ground_truth):
    return asyncio.run(worker.evaluate(make_sample(text, ground_truth)))


@pytest.mark.parametrize(
    "text, ground_truth",
    [
        (r"so \boxed{\frac{1}{2}}", "0.5"),
        (r"so \boxed{0.5}", r"\frac{1}{2}"),
        ("The answer is 1,234.", 1234),
        (r"\boxed{2\sqrt{3}}", r"2\sqrt{3}"),
        (r"\boxed{\dfrac{3}{4}}", r"$\frac34$"),
        ("<think>is it 3? no.</think> we get 4 apples", 4),
        ("It is -7.<|im_end|>", "-7"),
    ],
)
def test_correct_answers(worker, text, ground_truth):
    result = score(worker, text, ground_truth)
    assert (result.status, result.reward, result.correct) == ("ok", 1.0, True), result.info
    assert result.parts["answer"] == 1.0


@pytest.mark.parametrize(
    "text, ground_truth",
    [
        (r"\boxed{\frac{1}{3}}", "0.5"),
        (r"<think>\boxed{4}</think>The answer is 5", "4"),  # the right number only in the reasoning
        (r"\boxed{2\sqrt{3}}", "2"),  # bare "2\sqrt{3}" would parse as 2 without the $...$ wrapping
    ],
)
def test_wrong_answers(worker, text, ground_truth):
    result = score(worker, text, ground_truth)
    assert (result.status, result.reward, result.correct) == ("ok", 0.0, False)


def test_no_answer_is_a_legitimate_zero(worker):
    result = score(worker, "I do not know.", "3")
    assert (result.status, result.reward, result.correct, result.info) == ("ok", 0.0, False, "no answer")


def test_answer_fallback_none_ignores_stray_numbers():
    worker = MathRuleRewardWorker("math", answer_fallback="none", pool_size=1)
    try:
        result = score(worker, "we get 4", "4")
    finally:
        worker.close()
    assert (result.status, result.correct, result.info) == ("ok", False, "no answer")


def test_format_weight_rewards_a_box():
    worker = MathRuleRewardWorker("math", format_weight=0.1, pool_size=1)
    try:
        boxed_right = score(worker, r"\boxed{4}", "4")
        boxed_wrong = score(worker, r"\boxed{5}", "4")
        bare_right = score(worker, "The answer is 4", "4")
    finally:
        worker.close()
    assert (boxed_right.reward, boxed_right.parts) == (1.1, {"answer": 1.0, "format": 1.0})
    assert (boxed_wrong.reward, boxed_wrong.correct) == (0.1, False)
    assert boxed_wrong.parts == {"answer": 0.0, "format": 1.0}
    assert (bare_right.reward, bare_right.parts) == (1.0, {"answer": 1.0, "format": 0.0})


def test_unparseable_ground_truth_is_an_error(worker):
    assert score(worker, r"\boxed{1}", "").status == "error"


def test_checker_timeout_is_reported(worker):
    start = time.perf_counter()
    result = score(worker, HANGS_SYMPY, "1")
    assert result.status == "timeout", result.info
    assert time.perf_counter() - start < 3.0  # the checker's own 1.5 s deadline, before the pool's 3 s one
    assert score(worker, r"\boxed{1}", "1").correct is True


def test_hard_deadline_kills_the_check():
    # soft_timeout_s=0 turns the checker's own deadline off: only the pool's kill can stop the tower.
    worker = MathRuleRewardWorker("math", verify_timeout_s=0.5, soft_timeout_s=0, pool_size=1)
    try:
        asyncio.run(worker.evaluate(make_sample(r"\boxed{1}", "1")))  # wait out the worker's start
        start = time.perf_counter()
        result = score(worker, HANGS_SYMPY, "1")
        elapsed = time.perf_counter() - start
        after = score(worker, r"\boxed{1}", "1")
    finally:
        worker.close()
    assert result.status == "timeout" and "RewardTimeoutError" in result.info
    assert elapsed < 1.5
    assert after.correct is True
    assert worker.metrics()["status/timeout"] == 1


def test_soft_timeout_must_fit_in_the_hard_one():
    with pytest.raises(ValueError, match="soft_timeout_s"):
        MathRuleRewardWorker("math", verify_timeout_s=1.0, soft_timeout_s=2.0, pool_size=1)


NESTED_BRACES = r"\boxed{" + "{" * 50_000 + "1" + "}" * 50_000 + "}"  # 100 KB


@pytest.mark.parametrize(
    "name, text, status",
    [
        ("power tower", HANGS_SYMPY, "timeout"),
        ("power tower, unboxed", "so it is $9^{9^{9^{9}}}$", "timeout"),
        ("100 KB of nested braces", NESTED_BRACES, "timeout"),
        ("100 KB of unclosed braces", "{" * 100_000, "ok"),
        ("invalid UTF-8 (surrogate escapes)", b"\xff\xfe \\boxed{1} \x80".decode("utf-8", "surrogateescape"), "ok"),
        ("invalid UTF-8 (bytes)", b"\xff\xfe \\boxed{1} \x80", "ok"),
        ("empty response", "", "ok"),
    ],
)
def test_pathological_input_ends_as_a_status_within_the_deadline(worker, name, text, status):
    start = time.perf_counter()
    result = score(worker, text, "1")
    elapsed = time.perf_counter() - start
    assert result.status == status, (name, result.info)
    assert elapsed < worker.verify_timeout_s + 1.0  # the hard deadline, plus the kill and the reply
    if status == "ok":
        assert result.correct is ("boxed{1}" in str(text)), (name, result.info)
    assert score(worker, r"\boxed{2}", "2").correct is True  # the pool still answers
