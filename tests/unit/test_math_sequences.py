"""Lists with an ellipsis match only the same list (rlvr/workers/rewards/math_sequences.py)."""

from __future__ import annotations

import pytest

from rlvr.workers.rewards.math_sequences import list_with_ellipsis, sequence_verdict


@pytest.mark.parametrize("text,terms", [
    ("1, 2, \\ldots, n", ["1", "2", "...", "n"]),
    ("$1:2:3:\\dots$", ["1", "2", "3", "..."]),
    ("2, 4, 6, \u2026", ["2", "4", "6", "..."]),
    ("a_1, a_2, \\cdots, a_n", ["a_1", "a_2", "...", "a_n"]),
    ("0.333...", None),  # a repeating decimal: the ellipsis is inside a term
    ("1 + 2 + \\cdots + n", None),  # a sum, not a list
    ("1, 2, 3", None),
])
def test_a_list_is_one_with_an_ellipsis_standing_alone(text, terms):
    assert list_with_ellipsis(text) == terms


@pytest.mark.parametrize("gold,answer,verdict", [
    ("1, 2, \\ldots, n", "1, 3, 5, \\ldots, 2n-1", False),  # Math-Verify issue 14: shares the first term
    ("1:2:3:\\ldots", "1:4:9:\\ldots", False),
    ("1:2:3:\\ldots", "1 : 2 : 3 : \\dots", True),  # spaces and the ellipsis command do not matter
    ("0.5, 1, \\ldots", "\\frac{1}{2}, 1, \\ldots", False),  # terms compare as written or as plain numbers only
    ("0.5, 1, \\ldots", "1/2, 1.0, \\ldots", True),
    ("1, 2, 3, \\ldots", "1, 2, 3", False),  # one side a list with an ellipsis: the other must be the same list
    ("1, 3, 5, \\ldots", "1, 3, 5, 7, \\ldots", False),  # conservative: the same odd numbers, written otherwise
    ("1, 2, 3", "3, 2, 1", None),  # no ellipsis: left to the other checks
    (None, "1, \\ldots", None),
])
def test_only_the_same_list_matches(gold, answer, verdict):
    assert sequence_verdict(gold, answer) is verdict
