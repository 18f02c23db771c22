"""Rule-based math reward: extract the final answer, then ask math-verify whether it equals the ground truth.

math-verify runs in a KillableProcessPool: its own timeouts use signal.alarm, which works only in a main thread,
and some inputs (`9^{9^{9^{9}}}`) make sympy compute for hours.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Literal

from rlvr.workers.rewards.base import RewardLimits, RewardWorker
from rlvr.workers.rewards.math_answer import Fallback, extract_answer
from rlvr.workers.rewards.process_pool import KillableProcessPool
from rlvr.workers.rewards.result import RewardResult

Verdict = Literal["correct", "wrong", "timeout", "bad_gold"]

# Text that math-verify's LaTeX grammar already finds without help.
_MATH_DELIMITERS = ("$", "\\(", "\\[", "\\boxed")


class MathRuleRewardWorker(RewardWorker):
    """reward = 1 if the answer matches, plus `format_weight` if it came from a `\\boxed{}`.

    parts: {"answer": 0/1, "format": 0/1}. No extractable answer is a legitimate 0 (status ok, info "no answer").
    A check that outlives `verify_timeout_s` (the pool's hard deadline) or math-verify's own per-step timeout
    (half of it, whole seconds) is status "timeout", never a silent 0.
    """

    def __init__(
        self,
        domain: str,
        limits: RewardLimits | None = None,
        answer_fallback: Fallback = "last_number",
        format_weight: float = 0.0,
        pool_size: int = 2,
        verify_timeout_s: float = 5.0,
    ) -> None:
        super().__init__(domain, limits)
        if answer_fallback not in ("last_number", "none"):
            raise ValueError(f"answer_fallback must be 'last_number' or 'none', got {answer_fallback!r}")
        self.answer_fallback = answer_fallback
        self.format_weight = format_weight
        self.verify_timeout_s = verify_timeout_s
        # math-verify's own timeout applies to each parse and each comparison; signal.alarm takes whole seconds,
        # and 0 disables it, leaving only the pool's hard deadline (which then has to kill the worker).
        self._soft_timeout_s = math.floor(verify_timeout_s / 2)
        self._pool = KillableProcessPool(pool_size, initializer=_warm_up)

    async def score(self, sample: Any) -> RewardResult:
        answer, how = extract_answer(sample.response_text, self.answer_fallback)
        boxed = 1.0 if how == "boxed" else 0.0
        if answer is None:
            return RewardResult(reward=0.0, correct=False, parts={"answer": 0.0, "format": 0.0}, info="no answer")
        gold = str(sample.prompt.ground_truth)
        # Past verify_timeout_s the pool kills the worker and raises RewardTimeoutError: evaluate() reports it
        # as status "timeout".
        verdict = await self._pool.run(
            check_answer, gold, answer, self._soft_timeout_s, timeout_s=self.verify_timeout_s
        )
        if verdict == "timeout":
            return RewardResult.failed("timeout", f"math-verify timed out on answer {answer[:100]!r}")
        if verdict == "bad_gold":
            return RewardResult.failed("error", f"ground truth does not parse: {gold[:100]!r}")
        correct = verdict == "correct"
        return RewardResult(
            reward=float(correct) + self.format_weight * boxed,
            correct=correct,
            parts={"answer": float(correct), "format": boxed},
            info=f"{how}: {answer[:100]}",
        )

    def close(self) -> None:
        self._pool.close()
        super().close()


def as_math(text: str) -> str:
    """Wraps bare text in `$...$`. Bare, math-verify reads it with its plain-expression grammar, where
    `2\\sqrt{3}` parses as 2, `1,2,3` as 1.2 and `\\frac12` not at all; inside `$...$` its LaTeX grammar applies."""
    text = text.strip()
    return text if any(d in text for d in _MATH_DELIMITERS) else f"${text}$"


def check_answer(gold: str, answer: str, soft_timeout_s: int) -> Verdict:
    """Runs in a pool worker's main thread, where math-verify's signal-based timeouts work.

    Compares every parsed form of gold with every parsed form of the answer, as math_verify.verify does, but
    with raise_on_error=True so that its timeouts are seen (it would otherwise turn them into a silent False).
    """
    # Imported here, not at the top: only pool workers need math-verify (and the sympy it pulls in).
    from math_verify import verify
    from math_verify.errors import TimeoutException

    try:
        gold_forms = _parse(gold, soft_timeout_s)
        answer_forms = _parse(answer, soft_timeout_s)
    except TimeoutException:
        return "timeout"
    if not gold_forms:
        return "bad_gold"
    timed_out = False
    for gold_form in gold_forms:
        for answer_form in answer_forms:
            try:
                if verify(gold_form, answer_form, timeout_seconds=soft_timeout_s, raise_on_error=True):
                    return "correct"
            except TimeoutException:
                timed_out = True
            except Exception:
                pass  # a comparison that errors is a mismatch, as in math-verify itself
    return "timeout" if timed_out else "wrong"


def _parse(text: str, soft_timeout_s: int) -> list[Any]:
    """math-verify's parsed forms of `text`; [] if it cannot be parsed. Lets TimeoutException through."""
    from math_verify import parse

    try:
        return parse(as_math(text), parsing_timeout=soft_timeout_s, raise_on_error=True)
    except Exception:
        return []


def _warm_up() -> None:
    """Pool initializer: math-verify imports sympy and builds its parsers lazily (about a second of CPU), which
    would otherwise land on the first call's deadline."""
    # Its warnings are about what this module handles itself: "timeout disabled" (the pool's deadline is the
    # guard then) and swallowed timeouts (raise_on_error=True reports them). Each new worker would repeat them.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    check_answer("1", "1", 1)
