"""The answer checker's pure pieces: exact arithmetic, tiny numbers, percent readings, solved inequalities, and
whole verdicts (math-verify and sympy in this process; the reward runs the same code in its pool)."""

import time
from fractions import Fraction

import pytest
import sympy

from rlvr.workers.rewards.math_compare import (
    SoftTimeout,
    check_answer,
    deadline,
    equivalent,
    exact_value,
    numeric_verdict,
    parse_first,
    percent_readings,
    percent_value,
    solved_relation_matches,
)


def latex(text):
    """The first sympy form math-verify parses from `text` (through the checker's own normalization)."""
    return next(form for form in parse_first([("math", text)]) if not isinstance(form, str))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("3^{-200}", Fraction(1, 3**200)),
        ("\\frac{1}{2004!}", Fraction(1, __import__("math").factorial(2004))),
        ("\\frac{2^{2005}+1}{3 \\cdot 2^{2006}}", Fraction(2**2005 + 1, 3 * 2**2006)),
        ("-\\frac{40}{153}", Fraction(-40, 153)),
        ("(12+\\frac{3}{5})", Fraction(63, 5)),
        ("0.25", None),  # a decimal is inexact: it may be a rounding
        ("\\sqrt{2}", None),
        ("2^{10^{9}}", None),  # too large to compute: left to math-verify
    ],
)
def test_exact_value(text, expected):
    assert exact_value(latex(text)) == expected


@pytest.mark.parametrize(
    "gold, answer, expected",
    [
        ("3^{-200}", "3^{-201}", False),  # a float tolerance would call both 0
        ("3^{-200}", "\\frac{1}{3^{200}}", True),
        ("2^{100}", "1267650600228229401496703205377", False),
        ("5.89\\times10^{-7}", "5.89\\times10^{-8}", False),  # tiny: six significant digits, not decimal places
        ("0.0000001", "0.0000002", False),
        ("\\frac{1}{12}", "0.0833333333333333", None),  # normal magnitude, one side inexact: math-verify decides
        ("x", "1", None),  # not a number
    ],
)
def test_numeric_verdict(gold, answer, expected):
    assert numeric_verdict(latex(gold), latex(answer)) is expected


def test_percent_value_and_readings():
    pct, plain = latex("25\\%"), latex("0.25")
    assert percent_value(pct) == 25 and percent_value(plain) is None
    assert percent_readings(pct, plain) == [(25, plain), (sympy.Rational(1, 4), plain)]
    assert percent_readings(plain, pct) == [(plain, 25), (plain, sympy.Rational(1, 4))]
    assert percent_readings(pct, latex("2\\%")) == [(25, 2)]
    assert percent_readings(plain, plain) == [(plain, plain)]


@pytest.mark.parametrize(
    "gold, answer, expected",
    [
        ("(3, \\infty)", "3 < x", True),
        ("(-\\infty, 3)", "x < 3", True),
        ("[-2, 7]", "-2 \\le x \\le 7", True),
        ("x \\in [-2, 7]", "-2 \\le x \\le 7", True),  # membership parses as Eq(x, set)
        ("(-2, 2)", "x^2 < 4", False),  # not solved for x: it restates the problem
        ("(3, \\infty)", "x = 4", False),
        ("5", "x < 5", False),
    ],
)
def test_solved_relation_matches(gold, answer, expected):
    assert solved_relation_matches(latex(gold), latex(answer)) is expected


@pytest.mark.parametrize(
    "gold, answer, expected",
    [
        ("25", "25\\%", True),
        ("25\\%", "0.25", True),
        ("25", "0.25", False),  # no percent sign anywhere: 0.25 is not 25
        ("20\\%", "2\\%", False),
        ("\\frac{1}{2}", "0.5", True),
        ("-1, 2", "2, -1", True),
        ("(1, \\frac{9}{2})", "(4.5, 1)", False),
        ("y = 2x + 1", "2x - y + 1 = 0", True),
        ("y = 2x + 1", "2x - y - 1 = 0", False),
        ("k = 5", "5", True),
    ],
)
def test_equivalent(gold, answer, expected):
    assert equivalent(latex(gold), latex(answer)) is expected


def test_equivalent_compares_unparsed_text_as_strings():
    assert equivalent("\\text{a regular hexagon}", "\\text{a regular hexagon}")
    assert not equivalent("", "")
    assert not equivalent("x", sympy.Integer(1))


@pytest.mark.parametrize(
    "gold, candidates, expected",
    [
        ("4", [("math", "4")], "correct"),
        ("4", [("math", "5")], "wrong"),
        ("4", [("math", "\\frac{"), ("math", "4")], "correct"),  # the first candidate that parses is used
        ("4", [("text", "no number here")], "no_answer"),
        ("4", [], "no_answer"),
        ("", [("math", "4")], "bad_gold"),
        ("forty two", [("math", "42")], "bad_gold"),
        ("\\text{a regular hexagon}", [("math", "\\text{a regular hexagon}")], "correct"),  # as text
    ],
)
def test_check_answer(gold, candidates, expected):
    assert check_answer(gold, candidates, 5) == expected


def test_deadline_interrupts_python_code():
    with pytest.raises(SoftTimeout):
        with deadline(0.05):
            while True:
                time.sleep(0.001)
    with deadline(0):  # no deadline: nothing fires
        time.sleep(0.01)


def test_check_answer_reports_its_own_timeout():
    # The tower's comparison runs in sympy's Python code for hours: the checker's own deadline stops it.
    assert check_answer("1", [("math", "9^{9^{9^{9}}}")], 0.5) == "timeout"
