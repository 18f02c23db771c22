"""Answer normalization: pure string functions, no math-verify."""

import pytest

from rlvr.workers.rewards.math_normalize import (
    drop_currency,
    drop_thousands_separators,
    drop_units,
    expand_e_notation,
    expand_mixed_numbers,
    normalize_answer,
    normalize_percent,
    strip_delimiters,
    unicode_to_latex,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("$x$", "x"),
        ("$$x$$", "x"),
        ("\\( x \\).", "x"),
        ("\\[ \\frac{1}{2} \\]", "\\frac{1}{2}"),
        ("$a$ and $b$", "$a$ and $b$"),  # two spans, not one
        ("$5", "$5"),  # a currency sign, not a delimiter pair
    ],
)
def test_strip_delimiters(text, expected):
    assert strip_delimiters(text) == expected


def test_unicode_to_latex():
    assert unicode_to_latex("\u22125 \u00d7 \u03c0 \u2264 x\u00b2") == "-5 \\times  \\pi  \\le  x^{2}"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("11,\\! 111,\\! 111,\\! 100", "11111111100"),
        ("9{,}500", "9500"),
        ("1\\,000\\,000", "1000000"),
        ("7,425,000", "7425000"),
        ("1,000.99", "1000.99"),
        ("1 000", "1000"),
        ("32, 349", "32, 349"),  # a space after the comma: a list
        ("(1,234, 5)", "(1,234, 5)"),  # plain commas inside a longer answer may separate items
        ("1,2345", "1,2345"),  # not a group of three
    ],
)
def test_drop_thousands_separators(text, expected):
    assert drop_thousands_separators(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [("\\$16.20", "16.20"), ("1,000.99$", "1,000.99"), ("\u20ac12", "12"), ("18 dollars", "18"), ("USD 5", "5")],
)
def test_drop_currency(text, expected):
    assert drop_currency(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("\\frac{1}{3} \\text{meters}", "\\frac{1}{3}"),
        ("15\\mbox{ cm}^2", "15"),
        ("90^\\circ", "90"),
        ("41.8^{\\circ}", "41.8"),
        ("1.6 \\mathrm{~cm}", "1.6"),
        ("4:30 p.m.", "4:30"),
        ("33 golf balls", "33"),
        ("5.89\\times10^{-7} cm^2", "5.89\\times10^{-7}"),
        ("3 m", "3 m"),  # a one-letter unit cannot be told from a variable: kept
        ("4t", "4t"),  # a product, not a unit
        ("5 x", "5 x"),  # one letter: a variable, not a unit
        ("2 \\sin b", "2 \\sin b"),  # the head is not a plain number
        ("x \\text{ cm}", "x \\text{ cm}"),
        ("10^6", "10^6"),  # a one-digit power after a number is the number's, not a unit's
        ("2^8", "2^8"),
        ("12 \\text{ cm}^2", "12"),  # after a unit it is the unit's
        ("12\\,\\text{m}^{3}", "12"),
    ],
)
def test_drop_units(text, expected):
    assert drop_units(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [("5.89e-7", "5.89\\times10^{-7}"), ("4.5e33", "4.5\\times10^{33}"), ("1E+5", "1\\times10^{+5}"), ("2e", "2e"),
     ("x2e5", "x2e5")],
)
def test_expand_e_notation(text, expected):
    assert expand_e_notation(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("12\\frac{3}{5}", "(12+\\frac{3}{5})"),
        ("1 \\dfrac{1}{4}", "(1+\\frac{1}{4})"),
        ("3\\frac{5}{4}", "3\\frac{5}{4}"),  # improper: a product, not a mixed number
        ("2\\frac{\\pi}{3}", "2\\frac{\\pi}{3}"),
        ("x^2\\frac{1}{2}", "x^2\\frac{1}{2}"),  # the 2 is an exponent
    ],
)
def test_expand_mixed_numbers(text, expected):
    assert expand_mixed_numbers(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [("28 percent", "28\\%"), ("28 pct", "28\\%"), ("28 %", "28\\%"), ("28\\%", "28\\%"), ("28 percentage", "28\\%")],
)
def test_normalize_percent(text, expected):
    assert normalize_percent(text) == expected


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("$1,000.99", "1000.99"),
        ("\\$16,\\!386.20", "16386.20"),
        ("**73**", "73"),
        ("28 percent", "28\\%"),
        ("12.5 \\%", "12.5\\%"),
        ("1331 and 1728", "1331, 1728"),
        ("6 \\text{ and } 8", "6, 8"),
        ("a_{37} = 19, \\quad a_3 = 2", "a_{37} = 19, a_3 = 2"),
        ("1 - \\frac{1}{\\mathrm{e}}", "1 - \\frac{1}{e}"),
        ("4\\sqrt(2)", "4\\sqrt{2}"),
        ("4.5e33 \\text{ ergs}", "4.5\\times10^{33}"),
        ("1 \\frac{1}{4} \\text{ cups}", "(1+\\frac{1}{4})"),
        ("\u22125", "-5"),
        ("", ""),
    ],
)
def test_normalize_answer(answer, expected):
    assert normalize_answer(answer) == expected
