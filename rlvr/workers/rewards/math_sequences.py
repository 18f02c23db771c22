"""Sequences, ratios and lists written with an ellipsis (`1, 2, \\ldots, n`, `1:2:3:\\ldots`): equal only to the same
list.

math-verify reads such an answer as the terms it can parse and drops the ellipsis, so `1, 2, \\ldots, n` and
`1, 3, 5, \\ldots, 2n-1`, or `1:2:3:\\ldots` and `1:4:9:\\ldots`, come out equal (Math-Verify issue 14): a reward a
policy can exploit by writing any list that shares a first term. Here an answer whose list holds an ellipsis as a
term of its own, on either side, matches only a list with the same terms in the same places, the ellipsis included
(`\\ldots`, `\\dots`, `\\cdots`, `...` and `…` are one symbol). Terms compare as written (spaces aside) or as equal
numbers. An ellipsis inside a term (`0.333...`, `1 + 2 + \\cdots + n`) is not a list: left to the other checks.
Conservative by design: `1, 3, 5, \\ldots` and `1, 3, 5, 7, \\ldots` describe the same odd numbers but are judged
different, as a strict grader would.
"""

from __future__ import annotations

import re
from fractions import Fraction

from rlvr.workers.rewards.math_normalize import normalize_answer

_ELLIPSIS = re.compile(r"\\[lc]?dots\b|\.\.\.|\u2026|\\ldotp")
_SEPARATOR = re.compile(r"[,:;]")
ELLIPSIS = "..."


def list_with_ellipsis(text: str) -> list[str] | None:
    """The terms of `text` as a list, when one of its terms is an ellipsis standing alone; else None."""
    flat = _ELLIPSIS.sub(ELLIPSIS, normalize_answer(text))
    terms = [re.sub(r"\s+", "", t) for t in _SEPARATOR.split(flat)]
    terms = [t for t in terms if t]
    return terms if len(terms) > 1 and ELLIPSIS in terms else None


def same_term(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return Fraction(a) == Fraction(b)
    except (ValueError, ZeroDivisionError):
        return False


def sequence_verdict(gold: str | None, answer: str | None) -> bool | None:
    """True / False when either side is a list with an ellipsis; None to leave the pair to the other checks."""
    if gold is None or answer is None:
        return None
    gold_terms, answer_terms = list_with_ellipsis(gold), list_with_ellipsis(answer)
    if gold_terms is None and answer_terms is None:
        return None
    if gold_terms is None or answer_terms is None or len(gold_terms) != len(answer_terms):
        return False
    return all(same_term(g, a) for g, a in zip(gold_terms, answer_terms))
