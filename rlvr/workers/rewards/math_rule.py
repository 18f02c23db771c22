"""Rule-based math reward: find the answer's candidates in the response (math_answer), then ask math_compare,
math-verify underneath, whether the first one that parses equals the ground truth.

The comparison runs in a KillableProcessPool: sympy can compute for hours on some inputs (`9^{9^{9^{9}}}`), its
signal-based timeouts work only in a main thread, and a reward worker lives in a thread of a Ray actor.
"""

from __future__ import annotations

from typing import Any

from rlvr.data.reward_result import RewardResult
from rlvr.workers.rewards.base import RewardLimits, RewardWorker
from rlvr.workers.rewards.math_answer import Fallback, answer_preview, extract_candidates
from rlvr.workers.rewards.math_compare import check_answer, warm_up
from rlvr.workers.rewards.process_pool import KillableProcessPool


class MathRuleRewardWorker(RewardWorker):
    """reward = 1 if the answer matches, plus `format_weight` if it came from a box.

    parts: {"answer": 0/1, "format": 0/1}. No answer found is a legitimate 0 (status ok, info "no answer").
    A check that outlives `soft_timeout_s` (the checker's own deadline, default half of `verify_timeout_s`) or
    `verify_timeout_s` (the pool's hard deadline: the worker is killed) is status "timeout", never a silent 0; a
    ground truth that does not parse is status "error".

    answer_fallback: "last_number" (default) also takes an answer from a response without a box or an "answer is"
    phrase: its last LaTeX span or number (the default 135M model rarely writes \\boxed{}); "none" does not.
    """

    def __init__(
        self,
        domain: str,
        limits: RewardLimits | None = None,
        answer_fallback: Fallback = "last_number",
        format_weight: float = 0.0,
        pool_size: int = 2,
        verify_timeout_s: float = 5.0,
        soft_timeout_s: float | None = None,
    ) -> None:
        super().__init__(domain, limits)
        if answer_fallback not in ("last_number", "none"):
            raise ValueError(f"answer_fallback must be 'last_number' or 'none', got {answer_fallback!r}")
        self.answer_fallback = answer_fallback
        self.format_weight = format_weight
        self.verify_timeout_s = verify_timeout_s
        # The checker's own deadline (default: half the hard one; 0 turns it off) fires first and leaves the worker
        # alive (a kill costs a new worker and its second of imports); the pool's hard deadline is for code that
        # never returns to Python.
        if soft_timeout_s is not None and not 0 <= soft_timeout_s <= verify_timeout_s:
            raise ValueError(f"soft_timeout_s must be in [0, verify_timeout_s], got {soft_timeout_s}")
        self._soft_timeout_s = verify_timeout_s / 2 if soft_timeout_s is None else soft_timeout_s
        self._pool = KillableProcessPool(pool_size, initializer=warm_up)

    async def score(self, sample: Any) -> RewardResult:
        candidates, how = extract_candidates(sample.response_text, self.answer_fallback)
        boxed = 1.0 if how == "boxed" else 0.0
        if not candidates:
            return _no_answer()
        gold = str(sample.prompt.ground_truth)
        # Past verify_timeout_s the pool kills the worker and raises RewardTimeoutError: evaluate() reports it
        # as status "timeout".
        verdict = await self._pool.run(
            check_answer, gold, candidates, self._soft_timeout_s, timeout_s=self.verify_timeout_s
        )
        shown = (answer_preview(candidates, how) or candidates[0][1])[:100]
        if verdict == "timeout":
            return RewardResult.failed("timeout", f"answer check timed out on {shown!r}")
        if verdict == "bad_gold":
            return RewardResult.failed("error", f"ground truth does not parse: {gold[:100]!r}")
        if verdict == "no_answer":
            return _no_answer()
        correct = verdict == "correct"
        return RewardResult(
            reward=float(correct) + self.format_weight * boxed,
            correct=correct,
            parts={"answer": float(correct), "format": boxed},
            info=f"{how}: {shown}",
        )

    def close(self) -> None:
        self._pool.close()
        super().close()


def _no_answer() -> RewardResult:
    """No answer in the response: a legitimate 0, not a failure."""
    return RewardResult(reward=0.0, correct=False, parts={"answer": 0.0, "format": 0.0}, info="no answer")
