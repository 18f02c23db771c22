"""Answer extraction: pure string functions, no math-verify."""

import pytest

from rlvr.workers.rewards import math_answer
from rlvr.workers.rewards.math_answer import (
    answer_phrase,
    extract_answer,
    last_boxed,
    last_number,
    strip_thinking,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>try 3</think>The answer is 4", "The answer is 4"),
        ("try 3, no wait</think>The answer is 4", "The answer is 4"),  # opening tag was in the prompt
        ("<think>a</think>b<think>c</think>d", "d"),  # the last close wins
        ("no tags at all", "no tags at all"),
        ("<think>ran out of tokens at 42", ""),  # unclosed: only reasoning, no answer
        ("done</think>answer<think>more", "answer"),
    ],
)
def test_strip_thinking(text, expected):
    assert strip_thinking(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so \boxed{5}", "5"),
        (r"\boxed{1} then \boxed{2} finally \boxed{3}", "3"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{\left\{ x^{2} \right\}}", r"\left\{ x^{2} \right\}"),
        (r"\fbox{7}", "7"),
        (r"$\boxed 5$", "5"),
        (r"\boxed {12}", "12"),
        (r"\boxed{3} and then \boxed{4", "3"),  # the last box was cut off mid-way
        (r"\boxed{} \boxed{ 8. }", "8"),
        (r"\boxedfoo{1}", None),  # another command, not a box
        ("no box", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("So the answer is 42.", "42"),
        ("The final answer is $\\frac{1}{2}$. I hope it is correct.", "\\frac{1}{2}"),
        ("**Answer:** 18 dollars", "18"),
        ("Answer: $1,234", "1,234"),
        ("answer = 3.5.", "3.5"),
        ("The answer is: x = 5", "x = 5"),
        ("The answer is 1. Then the answer is 2.", "2"),
        ("nothing to see", None),
    ],
)
def test_answer_phrase(text, expected):
    assert answer_phrase(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("there are 12 eggs", "12"),
        ("it drops to -3 degrees", "-3"),
        ("x-5 so 7-2", "2"),  # a minus between terms is not a sign
        ("it costs 2.50.", "2.50"),
        ("total 1,234,567 people", "1234567"),
        ("1,2345", "2345"),  # not a thousands group
        ("half is 1/2", "1/2"),
        ("a list 1, 2, 3", "3"),
        ("no digits", None),
    ],
)
def test_last_number(text, expected):
    assert last_number(text) == expected


@pytest.mark.parametrize(
    "text, fallback, expected",
    [
        (r"<think>\boxed{1}</think>The answer is 2, so \boxed{3}", "last_number", ("3", "boxed")),
        (r"<think>\boxed{1}</think>The answer is 2.", "last_number", ("2", "phrase")),
        ("<think>maybe 7</think>we get 9<|im_end|>", "last_number", ("9", "last_number")),
        ("<think>maybe 7</think>we get 9", "none", (None, "none")),
        (r"<think>\boxed{7} but the context ran out", "last_number", (None, "none")),
        ("", "last_number", (None, "none")),
    ],
)
def test_extract_answer(text, fallback, expected):
    assert extract_answer(text, fallback) == expected


def test_extract_answer_rejects_unknown_fallback():
    with pytest.raises(ValueError):
        extract_answer("1", "first_number")


def test_broken_output_scans_its_braces_once(monkeypatch):
    # 20,000 unclosed boxes (a truncated, looping response): matching braces per box would be quadratic. The
    # braces are matched in one pass per response, whatever the number of boxes (counted, not timed).
    scans = []
    real = math_answer._matching_braces
    monkeypatch.setattr(math_answer, "_matching_braces", lambda text: scans.append(len(text)) or real(text))
    assert extract_answer("\\boxed{" * 20000 + "7") == ("7", "last_number")  # every box is unclosed
    assert len(scans) == 1
