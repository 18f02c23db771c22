"""Is the answer equal to the ground truth? math-verify underneath, corrected where it is wrong:

- two exact numbers (integers, fractions, integer powers, factorials) are compared exactly: math-verify's float
  tolerance calls 3^{-200} and 3^{-201}, or 1/2004! and 1/2006!, equal;
- two tiny numbers (below 1e-3) must agree to six significant digits, not six decimal places (5.89e-7 vs 5.89e-8);
- a percent on one side is read both as its number and as a fraction (25% = 0.25, and 25% answers "25");
- an inequality solved for its variable (`3 < x`, `-2 \\le x \\le 7`) equals the interval it describes, whichever
  side is the gold (math-verify only converts the gold's). An unsolved one (`x^2 < 4`) does not: that restates the
  problem.

Runs in a pool worker (check_answer): math-verify's timeouts use SIGALRM in whole seconds, so they are switched off
and one deadline of our own (setitimer, fractions of a second allowed) covers the whole check; the pool's hard
deadline stays behind it for code that never returns to Python (a huge integer power).
"""

from __future__ import annotations

import logging
import math
import signal
from contextlib import contextmanager
from fractions import Fraction
from typing import Any, Iterator, Literal

from rlvr.workers.rewards.math_answer import Candidate, gold_candidates
from rlvr.workers.rewards.math_normalize import normalize_answer
from rlvr.workers.rewards.math_sequences import sequence_verdict

Verdict = Literal["correct", "wrong", "no_answer", "timeout", "bad_gold"]

TINY = 1e-3  # below this magnitude, rounding to six decimal places says nothing
TINY_REL_TOL = 1e-6
MAX_EXACT_BITS = 200_000  # larger exact powers are left to math-verify: computing them could take minutes
MAX_FACTORIAL = 5_000


class SoftTimeout(BaseException):
    """Our own deadline fired. A BaseException, so that math-verify's and sympy's `except Exception` do not eat it."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raises SoftTimeout in the main thread after `seconds` (no deadline if seconds <= 0)."""
    if seconds <= 0:
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise SoftTimeout()

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_answer(gold: str, candidates: list[Candidate], soft_timeout_s: float) -> Verdict:
    """The verdict for one answer: the first candidate that parses, against the first reading of the gold that
    parses ("no_answer" when no candidate does). Runs in a pool worker's main thread (the deadline uses SIGALRM)."""
    try:
        with deadline(soft_timeout_s):
            gold_readings = gold_candidates(gold)
            gold_forms = parse_first(gold_readings)
            if not gold_forms:
                return "bad_gold"
            answer_forms = parse_first(candidates)
            if not answer_forms:
                return "no_answer"
            listed = sequence_verdict(first_math(gold_readings), first_math(candidates))
            if listed is not None:  # a list with an ellipsis matches only the same list (math_sequences.py)
                return "correct" if listed else "wrong"
            if any(equivalent(g, a) for g in gold_forms for a in answer_forms):
                return "correct"
            return "wrong"
    except SoftTimeout:
        return "timeout"


def first_math(candidates: list[Candidate]) -> str | None:
    return next((text for kind, text in candidates if kind == "math"), None)


def parse_first(candidates: list[Candidate]) -> list[Any]:
    """math-verify's parsed forms (sympy objects and the matched string) of the first candidate that parses to a
    sympy object; failing that, the string forms of the first candidate math-verify found at all (two answers that
    no parser reads can still be the same text); [] if there is nothing."""
    strings_only: list[Any] = []
    for kind, text in candidates:
        if kind == "math":
            normalized = normalize_answer(text)
            forms = _parse(f"${normalized}$") if normalized else []
        else:
            forms = _parse(text)
        if any(not isinstance(form, str) for form in forms):
            return forms
        strings_only = strings_only or forms
    return strings_only


def equivalent(gold: Any, answer: Any) -> bool:
    """One parsed gold form against one parsed answer form (sympy objects or strings)."""
    if isinstance(gold, str) or isinstance(answer, str):
        return isinstance(gold, str) and isinstance(answer, str) and gold.strip() == answer.strip() != ""
    for g, a in percent_readings(gold, answer):
        numeric = numeric_verdict(g, a)
        if numeric is not None:
            if numeric:
                return True
            continue
        if _verify(g, a) or solved_relation_matches(g, a):
            return True
    return False


def percent_readings(gold: Any, answer: Any) -> list[tuple[Any, Any]]:
    """The pairs to compare: as they are when neither side is a percent; both numbers when both are; the percent's
    number and its fraction (25% -> 25 and 1/4) against the other side when only one is."""
    gold_pct, answer_pct = percent_value(gold), percent_value(answer)
    if gold_pct is None and answer_pct is None:
        return [(gold, answer)]
    if gold_pct is not None and answer_pct is not None:
        return [(gold_pct, answer_pct)]
    if gold_pct is not None:
        return [(gold_pct, answer), (gold_pct / 100, answer)]
    return [(gold, answer_pct), (gold, answer_pct / 100)]


def percent_value(expr: Any) -> Any | None:
    """X for math-verify's X% (X * UnevaluatedExpr(1/100)), else None."""
    import sympy

    if isinstance(expr, sympy.Mul) and len(expr.args) == 2:
        value, unit = expr.args
        if isinstance(unit, sympy.UnevaluatedExpr) and unit.args[0] == sympy.Rational(1, 100):
            return value
    return None


def numeric_verdict(gold: Any, answer: Any) -> bool | None:
    """True/False when both sides are plain numbers this module decides itself (both exact, or one tiny); None
    to leave the pair to math-verify."""
    if not (_is_number(gold) and _is_number(answer)):
        return None
    exact_gold, exact_answer = exact_value(gold), exact_value(answer)
    if exact_gold is not None and exact_answer is not None:
        return exact_gold == exact_answer
    approx_gold, approx_answer = approx_value(gold), approx_value(answer)
    if approx_gold is None or approx_answer is None:
        return None
    scale = max(abs(approx_gold), abs(approx_answer))
    if 0 < scale < TINY:
        return abs(approx_gold - approx_answer) <= TINY_REL_TOL * scale
    return None


def exact_value(expr: Any) -> Fraction | None:
    """The exact rational value of an expression built from integers, fractions, sums, products, integer powers and
    factorials; None if anything in it is inexact (a decimal Float, sqrt, pi) or too large to compute quickly."""
    import sympy

    if isinstance(expr, sympy.UnevaluatedExpr):
        return exact_value(expr.args[0])
    if isinstance(expr, sympy.Rational):  # Integer is a Rational
        return Fraction(int(expr.p), int(expr.q))
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        values = [exact_value(arg) for arg in expr.args]
        if any(value is None for value in values):
            return None
        total = Fraction(0) if isinstance(expr, sympy.Add) else Fraction(1)
        for value in values:
            total = total + value if isinstance(expr, sympy.Add) else total * value
        return total
    if isinstance(expr, sympy.Pow):
        return _exact_power(exact_value(expr.base), exact_value(expr.exp))
    if isinstance(expr, sympy.factorial):
        n = exact_value(expr.args[0])
        if n is not None and n.denominator == 1 and 0 <= n <= MAX_FACTORIAL:
            return Fraction(math.factorial(int(n)))
    return None


def approx_value(expr: Any) -> float | None:
    """A float for a real number expression (30 significant digits internally); None if not real or not finite."""
    try:
        value = complex(expr.evalf(30))
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None
    if value.imag != 0 or not math.isfinite(value.real):
        return None
    return value.real


def solved_relation_matches(gold: Any, answer: Any) -> bool:
    """An inequality solved for its one variable against a set/interval gold: compares the set it describes."""
    import sympy

    if isinstance(gold, sympy.Eq) and isinstance(gold.rhs, sympy.Set):  # "x \\in [a, b]" parses as Eq(x, [a, b])
        gold = gold.rhs
    if not isinstance(gold, sympy.Set) or not _is_solved_inequality(answer):
        return False
    try:
        return _verify(gold, answer.as_set())
    except Exception:
        return False


def _is_solved_inequality(expr: Any) -> bool:
    """`x < 3`, `3 <= x`, `-2 <= x <= 7` (an And of such): one variable alone on one side, constants on the other."""
    import sympy

    parts = expr.args if isinstance(expr, sympy.And) else (expr,)
    if not parts or not all(isinstance(p, sympy.core.relational.Relational) for p in parts):
        return False
    if any(isinstance(p, (sympy.Eq, sympy.Ne)) for p in parts) or len(expr.free_symbols) != 1:
        return False
    return all(
        (isinstance(p.lhs, sympy.Symbol) and not p.rhs.free_symbols)
        or (isinstance(p.rhs, sympy.Symbol) and not p.lhs.free_symbols)
        for p in parts
    )


def _is_number(expr: Any) -> bool:
    import sympy

    return isinstance(expr, sympy.Expr) and not expr.free_symbols and not isinstance(expr, sympy.MatrixBase)


def _exact_power(base: Fraction | None, exponent: Fraction | None) -> Fraction | None:
    if base is None or exponent is None or exponent.denominator != 1:
        return None
    n = int(exponent)
    if base == 0:
        return None if n < 0 else Fraction(int(n == 0))
    bits = abs(n) * max(abs(base.numerator), base.denominator).bit_length()
    if bits > MAX_EXACT_BITS:
        return None
    return base**n


def _parse(text: str) -> list[Any]:
    """math-verify's default extraction (LaTeX spans, then plain numbers/expressions), without its own timeout."""
    from math_verify import parse

    try:
        return parse(text, parsing_timeout=None)
    except Exception:
        return []


def _verify(gold: Any, answer: Any) -> bool:
    from math_verify import verify

    try:
        return verify(gold, answer, timeout_seconds=None)
    except Exception:
        return False


def warm_up() -> None:
    """Pool initializer: math-verify imports sympy and builds its parsers lazily (about a second of CPU), which
    would otherwise land on the first call's deadline. Its "timeout disabled" warning is about what this module
    does itself (the deadline above), and each new worker would repeat it."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    check_answer("1", [("math", "1")], 0)
