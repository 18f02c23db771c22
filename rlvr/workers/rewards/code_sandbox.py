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

A sandbox server this worker started itself (`sandbox="http"` without a `url`) and that dies is started again,
by a watcher thread or by the first call that finds it gone, whichever comes first (at most `server_restarts`
times; counted as `faults/sandbox_restarts`); calls that failed meanwhile are retried by the base class against
the new server.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal

from rlvr.data.reward_result import RewardResult
from rlvr.workers.rewards.base import RewardLimits, RewardWorker, TransientRewardError
from rlvr.workers.rewards.code_extract import LANGUAGE_TAGS, extract_code
from sandbox.client import HTTPSandboxClient, LocalSandboxClient, LocalSandboxServer, SandboxConnectionError
from sandbox.testing import run_tests
from sandbox.types import Limits

logger = logging.getLogger(__name__)
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
        server_restarts: int = 3,
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
        self._server: LocalSandboxServer | None = None
        if sandbox == "local":
            self._client = LocalSandboxClient(max_parallel=max_parallel)
        else:
            if url is None:
                self._server = LocalSandboxServer(max_parallel=max_parallel, max_restarts=server_restarts,
                                                  on_restart=self.server_moved)
                url = self._server.start()
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
            await self._recover_server()
            raise TransientRewardError(str(e)) from e
        correct = report.all_passed
        reward = report.pass_frac if self.reward_mode == "pass_fraction" else float(correct)
        return RewardResult(
            reward=reward,
            correct=correct,
            parts={"pass_frac": report.pass_frac, "compiled": float(report.compiled)},
            info=f"{sum(report.passed)}/{report.total} passed; {report.info}"[:500],
        )

    async def _recover_server(self) -> None:
        """Our own server died: start it again now, or wait for the watcher doing so (shielded from the caller's
        deadline, so that a slow start is never left half done). Out of restarts, calls fail: status error,
        counted.

        No `alive()` shortcut: a restart in progress has a live process that does not answer yet, and a retry sent
        then is refused again; three quick refusals spent a sample's every attempt (the chaos test failed so on
        a 2-core EPYC). `ensure_running` takes the server's lock, so it returns once a restart under way is
        healthy."""
        server = self._server
        if server is None:
            return
        await asyncio.shield(asyncio.get_running_loop().run_in_executor(None, server.ensure_running))

    def server_moved(self, url: str) -> None:
        """The sandbox server answers at a new address (restarted on another port): calls go there."""
        logger.warning("sandbox server restarted at %s", url)
        self._client.url = self.url = url

    def health(self) -> dict[str, Any]:
        if self._server is None:
            return {}
        return {"sandbox_pid": self._server.pid, "sandbox_alive": self._server.alive(),
                "sandbox_url": self._server.url,
                "sandbox_restarts": self._server.restarts}

    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        if new := self._sandbox_restarts() - self._restarts_reported:
            out["faults/sandbox_restarts"] = float(new)
        return out

    def reset_metrics(self) -> None:
        super().reset_metrics()
        self._restarts_reported = self._sandbox_restarts()

    def _sandbox_restarts(self) -> int:
        server = getattr(self, "_server", None)  # reset_metrics runs in the base constructor, before it is set
        return server.restarts if server is not None else 0

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        super().close()
