"""Answer extraction: pure string functions, no math-verify."""

import pytest

from rlvr.workers.rewards import math_answer
from rlvr.workers.rewards.math_answer import (
    answer_phrase,
    clean_response,
    extract_answer,
    extract_candidates,
    first_turn,
    fullwidth_to_ascii,
    gold_candidates,
    last_boxed,
    last_number,
    looks_like_math,
    sanitize,
    strip_thinking,
    unicode_box_frames,
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
        ("It is 9.<|im_end|>", "It is 9."),
        ("It is 9.<|im_end|>\n<|im_start|>user\nAnd 3+5?<|im_end|>\n<|im_start|>assistant\n8", "It is 9."),
        ("<|im_start|>assistant\nIt is 9.", "It is 9."),  # a leading header and its role name
        ("60<|eot_id|>", "60"),
        ("<|begin\u2581of\u2581sentence|>12<|end\u2581of\u2581sentence|>junk", "12"),
        ("a <|some_marker|> b", "a  b"),  # other special tokens are removed, the text goes on
        ("It is 9.</s><s>[INST] next", "It is 9."),
    ],
)
def test_first_turn(text, expected):
    assert first_turn(text) == expected


def test_fullwidth_to_ascii():
    assert fullwidth_to_ascii("\uff3cboxed\uff5b\uff14\uff12\uff5d\u3000ok") == "\\boxed{42} ok"
    assert fullwidth_to_ascii("x\u00b2 = 4") == "x\u00b2 = 4"  # superscripts are not fullwidth forms


def test_unicode_box_frames():
    framed = "so\n\u250c\u2500\u2500\u2500\u2500\u2510\n\u2502 42 \u2502\n\u2514\u2500\u2500\u2500\u2500\u2518\ndone"
    assert unicode_box_frames(framed) == "so\n\\boxed{42}\ndone"
    assert unicode_box_frames("\u2502 42 \u2502") == "\u2502 42 \u2502"  # a bar alone is no frame


def test_glyph_boxes_mark_the_answer_like_boxed():
    assert math_answer.glyph_boxes("so \u25a1{42}") == "so \\boxed{42}"
    assert math_answer.glyph_boxes("\u25a0 {7} and \u2610{8}") == "\\boxed{7} and \\boxed{8}"
    assert math_answer.glyph_boxes("a \u25a1 b") == "a \u25a1 b"  # a glyph without braces is left alone
    candidates, how = math_answer.extract_candidates("6 x 7 = 42, minus 2.\nThe final answer is \u25a1{40}")
    assert (candidates, how) == ([("math", "40")], "boxed")


def test_a_response_that_is_one_bare_set_literal_is_read_as_math():
    assert math_answer.extract_candidates("{5, 2}") == ([("math", "{5, 2}")], "last_number")
    assert math_answer.extract_candidates("\\{5, 2\\}")[0] == [("math", "\\{5, 2\\}")]
    # prose around it: the set is not the whole response, the old reading stays
    assert ("math", "{5, 2}") not in math_answer.extract_candidates("maybe {5, 2} or so")[0]


def test_sanitize():
    assert sanitize(b"\xff\\boxed{1}") == "\ufffd\\boxed{1}"
    assert sanitize("a\udcffb") == "a?b"  # a lone surrogate (surrogateescape) cannot be encoded: replaced
    assert sanitize(12) == "12"


def test_clean_response_chains_the_steps():
    text = "<think>\\boxed{1}</think>\uff3cboxed\uff5b2\uff5d<|im_end|><|im_start|>user\n\\boxed{3}"
    assert clean_response(text) == "\\boxed{2}"


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so \boxed{5}", "5"),
        (r"\boxed{1} then \boxed{2} finally \boxed{3}", "3"),  # prose between boxes: separate attempts
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{\left\{ x^{2} \right\}}", r"\left\{ x^{2} \right\}"),
        (r"\fbox{7}", "7"),
        (r"$\boxed 5$", "5"),
        (r"\boxed {12}", "12"),
        ("boxed{7}", "7"),  # the backslash got lost
        ("so boxed {12} it is", "12"),
        ("the boxed answer is 3", None),  # the word, not a box
        (r"\boxed{3} and then \boxed{4", "3"),  # the last box was cut off mid-way
        (r"\boxed{} \boxed{ 8. }", "8"),
        (r"\boxedfoo{1}", None),  # another command, not a box
        ("no box", None),
        # Boxes of one answer: joined by commas, "and", \quad, delimiters, or the next part's name.
        (r"\boxed{1} and \boxed{2} and \boxed{3}", "1, 2, 3"),
        (r"\[ \boxed{-2} \quad \text{and} \quad \boxed{1}. \]", "-2, 1"),
        (r"\(\boxed{1}\) and \(\boxed{-2}\).", "1, -2"),
        (r"$\boxed{(3, 3)} \text{ for part (a) and } \boxed{(1, 1)}$", "(3, 3), (1, 1)"),
        (r"$y_1 = \boxed{a}$ and $y_2 = \boxed{b}$", "a, b"),
        (r"\boxed{2}. wait, actually \boxed{3}", "3"),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("So the answer is 42.", "42"),
        ("The final answer is $\\frac{1}{2}$. I hope it is correct.", "$\\frac{1}{2}$"),
        ("**Answer:** 18 dollars", "18 dollars"),
        ("Answer: $1,234", "$1,234"),
        ("answer = 3.5.", "3.5"),
        ("The answer is: x = 5", "x = 5"),
        ("The answer is 1. Then the answer is 2.", "2"),
        ("Answer \\[ \n 9 \n \\]", "\\[ \n 9 \n \\]"),  # a math span right after the anchor may span lines
        ("Answer $ \\frac{1}{2} \\$ = 3 $ then", "$ \\frac{1}{2} \\$ = 3 $"),  # \\$ does not close the span
        ("Janet makes $18.\n#### 18", "18"),
        ("\u6240\u4ee5\u7b54\u6848\u662f 960\u3002", "960"),
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
    "text, expected",
    [
        ("\\frac{1}{2}", True),
        ("1331 and 1728", True),
        ("\\text{Evelyn}", True),  # \text{} contents are the answer's own words
        ("4:30 p.m.", True),
        ("Jane started growing Sphere 3 hours ago", False),
        ("correct", False),
    ],
)
def test_looks_like_math(text, expected):
    assert looks_like_math(text) == expected


@pytest.mark.parametrize(
    "text, fallback, expected",
    [
        (r"<think>\boxed{1}</think>The answer is 2, so \boxed{3}", "last_number", ([("math", "3")], "boxed")),
        # The last strong anchor wins: a "final answer is" after a box (the box held an intermediate).
        (r"so \boxed{255}. Final Answer: The final answer is $10,455$. I hope", "last_number",
         ([("math", "$10,455$"), ("text", "$10,455$")], "phrase")),
        (r"The final answer is 3 \boxed{4}", "last_number", ([("math", "4")], "boxed")),
        # A strong anchor beats a later weak one.
        (r"\boxed{4}. So the answer is 5", "last_number", ([("math", "4")], "boxed")),
        ("Final Answer: Jane started it 3 hours ago.", "last_number",
         ([("text", "Jane started it 3 hours ago")], "phrase")),
        ("**Answer**: 42", "last_number", ([("math", "42"), ("text", "42")], "phrase")),
        # A weak phrase followed by prose is not final: the search of the text goes on after it.
        ("The answer is correct. x = 5", "last_number",
         ([("text", "correct"), ("text", "The answer is correct. x = 5"), ("math", "5")], "phrase")),
        ("The answer is correct. x = 5", "none", ([("text", "correct")], "phrase")),
        ("we get 9 apples", "last_number", ([("text", "we get 9 apples"), ("math", "9")], "last_number")),
        ("$(7, 6)$", "last_number", ([("math", "$(7, 6)$")], "last_number")),  # one span: math as a whole
        ("so $x = 2$ and then $y = 3$", "last_number", ([("text", "so $x = 2$ and then $y = 3$")], "last_number")),
        ("we get 9 apples", "none", ([], "none")),
        (r"<think>\boxed{7} but the context ran out", "last_number", ([], "none")),
        (r"so the answer is \boxed{\frac{1}{2}", "last_number", ([], "none")),  # cut off inside its box
        ("", "last_number", ([], "none")),
    ],
)
def test_extract_candidates(text, fallback, expected):
    assert extract_candidates(text, fallback) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so \boxed{3}", ("3", "boxed")),
        ("<think>maybe 7</think>we get 9<|im_end|>", ("9", "last_number")),
        ("The answer is 18 dollars.", ("18 dollars", "phrase")),
        ("nothing", (None, "none")),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_extract_rejects_unknown_fallback():
    with pytest.raises(ValueError):
        extract_candidates("1", "first_number")


@pytest.mark.parametrize(
    "gold, expected",
    [
        ("2\\sqrt{3}", [("math", "2\\sqrt{3}"), ("text", "2\\sqrt{3}")]),  # bare: math as a whole
        ("1331 and 1728", [("math", "1331 and 1728"), ("text", "1331 and 1728")]),
        ("$x \\in [-2,7]$", [("math", "$x \\in [-2,7]$")]),
        ("\\boxed{42}", [("math", "42")]),
        ("$\\boxed{1}\\boxed{2}$", [("math", "1, 2")]),
        ("the solution is $m > 2$.", [("text", "the solution is $m > 2$.")]),  # prose: searched like a response
        ("", []),
    ],
)
def test_gold_candidates(gold, expected):
    assert gold_candidates(gold) == expected


def test_broken_output_scans_its_braces_once(monkeypatch):
    # 20,000 unclosed boxes (a truncated, looping response): matching braces per box would be quadratic. The
    # braces are matched in one pass per response, whatever the number of boxes (counted, not timed).
    scans = []
    real = math_answer._matching_braces
    monkeypatch.setattr(math_answer, "_matching_braces", lambda text: scans.append(len(text)) or real(text))
    assert extract_candidates("\\boxed{" * 20000 + "7") == ([], "none")  # cut off inside its last box
    assert extract_candidates("\\boxed{" * 20000 + "7}") == ([("math", "7")], "boxed")
    assert len(scans) == 2
