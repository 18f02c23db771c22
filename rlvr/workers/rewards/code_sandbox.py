"""Code reward: run the response's program against the prompt's tests in the sandbox (sandbox/), reward the
passes.

The tests come from `sample.prompt.ground_truth` (a dict or its JSON text) in one of the formats of
sandbox/testing.py: assert, pytest, stdio, call. The program is the last fenced code block of the response in
the language (`prompt.meta["language"]` when the row sets one, else the worker's `language`).

    reward   pass fraction ("pass_fraction") or 1.0 only when every test passes ("all_pass")
    correct  every test passed
    parts    {"pass_frac": fraction passed, "compiled": 1.0 when the code compiled (C/C++) / parsed (Python)}

A response without a code block is a legitimate 0 (status ok, info "no code block"); a program that crashes,
times out or prints garbage fails its tests (status ok, reward from the passes). What is not the program's
fault raises, so the base class reports it (status error, counted, masked out of the loss): an unreachable
sandbox server (TransientRewardError: retried), a sandbox that cannot start programs, a malformed test spec.
"""

from __future__ import annotations

from typing import Any, Literal

from rlvr.workers.rewards.base import RewardLimits, RewardWorker, TransientRewardError
from rlvr.workers.rewards.code_extract import LANGUAGE_TAGS, extract_code
from rlvr.workers.rewards.result import RewardResult
from sandbox.client import HTTPSandboxClient, LocalSandboxClient, SandboxConnectionError, start_local_server
from sandbox.testing import run_tests
from sandbox.types import Limits

SandboxKind = Literal["local", "http"]
RewardMode = Literal["pass_fraction", "all_pass"]


class CodeSandboxRewardWorker(RewardWorker):
    """`sandbox="local"` runs programs in this process's own bubblewrap backend; `"http"` talks to a sandbox
    server at `url`, or starts one on loopback (and stops it on close()) when `url` is None. `max_parallel`
    bounds the programs running at once; `run_limits` overrides sandbox.types.Limits fields per run (cpu_time_s,
    wall_time_s, memory_mb, ...)."""

    def __init__(
        self,
        domain: str,
        limits: RewardLimits | None = None,
        sandbox: SandboxKind = "local",
        url: str | None = None,
        max_parallel: int = 2,
        reward_mode: RewardMode = "pass_fraction",
        language: str = "python",
        run_limits: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(domain, limits)
        if sandbox not in ("local", "http"):
            raise ValueError(f"sandbox must be 'local' or 'http', got {sandbox!r}")
        if reward_mode not in ("pass_fraction", "all_pass"):
            raise ValueError(f"reward_mode must be 'pass_fraction' or 'all_pass', got {reward_mode!r}")
        if language not in LANGUAGE_TAGS:
            raise ValueError(f"language must be one of {sorted(LANGUAGE_TAGS)}, got {language!r}")
        if url is not None and sandbox != "http":
            raise ValueError("url is only used with sandbox='http'")
        self.reward_mode = reward_mode
        self.language = language
        self.run_limits = Limits.from_dict(run_limits)
        self._stop_server = None
        if sandbox == "local":
            self._client = LocalSandboxClient(max_parallel=max_parallel)
        else:
            if url is None:
                url, self._stop_server = start_local_server(max_parallel=max_parallel)
            # The HTTP deadline is the base class's per-attempt deadline: a slow queue is a timeout, not a hang.
            self._client = HTTPSandboxClient(url, timeout_s=self.limits.timeout_s)
        self.url = url

    async def score(self, sample: Any) -> RewardResult:
        language = (sample.prompt.meta or {}).get("language", self.language)
        code = extract_code(sample.response_text, language)
        if code is None:
            return RewardResult(reward=0.0, correct=False, parts={"pass_frac": 0.0, "compiled": 0.0},
                                info="no code block")
        try:
            report = await run_tests(self._client, code, sample.prompt.ground_truth, language, self.run_limits)
        except SandboxConnectionError as e:
            raise TransientRewardError(str(e)) from e
        correct = report.all_passed
        reward = report.pass_frac if self.reward_mode == "pass_fraction" else float(correct)
        return RewardResult(
            reward=reward,
            correct=correct,
            parts={"pass_frac": report.pass_frac, "compiled": float(report.compiled)},
            info=f"{sum(report.passed)}/{report.total} passed; {report.info}"[:500],
        )

    def close(self) -> None:
        if self._stop_server is not None:
            self._stop_server()
            self._stop_server = None
        super().close()
