"""Code repair: fix a buggy Python function, with the sandbox's verdict on each attempt as the next observation.

A task is a small function with one planted bug and assert-style tests (`make_tasks` draws them from the
templates below, seeded; a data file can supply its own rows of {"fn", "code", "tests"}). Each attempt (the last
```python block of the reply) runs against the tests in sandbox/ (bubblewrap + rlimits, the same runner as the
code reward, sandbox/testing.py); the tests it fails come back as the next observation.

    reward   1.0 when every test passes (done, success); 0.0 for an attempt that fails tests;
             `invalid_penalty` for a reply without a code block (an invalid action: the env asks again)
    state    the default (the observation text): equal failure reports are equal states
    errors   a sandbox that cannot run programs raises (the episode is masked with status error), as in the
             code reward: that is not the policy's fault
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable

from rlvr.envs.base import Env
from rlvr.workers.rewards.code_extract import extract_code
from sandbox.client import HTTPSandboxClient, LocalSandboxClient
from sandbox.testing import TestReport, run_tests
from sandbox.types import Limits

ASK = "Reply with the whole corrected function in a ```python code block."


def _ints(rng: random.Random, n: int = 3, lo: int = -9, hi: int = 20) -> list[tuple]:
    return [(rng.randint(lo, hi),) for _ in range(n)]


def _lists(rng: random.Random) -> list[tuple]:
    return [([rng.randint(-9, 9) for _ in range(rng.randint(2, 5))],) for _ in range(3)]


# (name, buggy source with {k}, reference implementation of k, test inputs). The references run here, on our own
# templates, only to compute expected values; the policy's code only ever runs in the sandbox.
TEMPLATES: list[tuple[str, str, Callable[[int], Callable], Callable[[random.Random], list[tuple]]]] = [
    ("add_k", "def add_k(x):\n    return x - {k}\n", lambda k: lambda x: x + k, _ints),
    ("times_k", "def times_k(x):\n    return x + {k}\n", lambda k: lambda x: x * k, _ints),
    ("is_multiple", "def is_multiple(n):\n    return n % {k} == 1\n", lambda k: lambda n: n % k == 0,
     lambda rng: [(k,) for k in (rng.randint(0, 30), rng.randint(0, 30), 0)]),
    ("largest", "def largest(xs):\n    return min(xs)\n", lambda k: max, _lists),
    ("last_item", "def last_item(xs):\n    return xs[0]\n", lambda k: lambda xs: xs[-1], _lists),
    ("sum_to", "def sum_to(n):\n    return sum(range(n))\n", lambda k: lambda n: sum(range(n + 1)),
     lambda rng: _ints(rng, lo=1, hi=30)),
    ("factorial", "def factorial(n):\n    result = 1\n    for i in range(1, n):\n        result *= i\n"
     "    return result\n", lambda k: math.factorial, lambda rng: _ints(rng, lo=3, hi=8)),
    ("reverse_text", "def reverse_text(s):\n    return s\n", lambda k: lambda s: s[::-1],
     lambda rng: [("".join(rng.choice("abcdef") for _ in range(rng.randint(2, 6))),) for _ in range(3)]),
    ("clamp_k", "def clamp_k(x):\n    return min(0, max(x, {k}))\n", lambda k: lambda x: max(0, min(x, k)),
     lambda rng: _ints(rng, lo=-20, hi=20)),
]


def make_task(index: int, rng: random.Random) -> dict[str, Any]:
    name, source, reference, inputs = TEMPLATES[index % len(TEMPLATES)]
    k = rng.randint(2, 9)
    ref = reference(k)
    tests = list(dict.fromkeys(f"assert {name}({', '.join(map(repr, args))}) == {ref(*args)!r}"
                               for args in inputs(rng)))  # a repeated input is one test, not two
    return {"fn": name, "code": source.format(k=k), "tests": tests}


_LOCAL_CLIENTS: dict[int, LocalSandboxClient] = {}


def _local_client(max_parallel: int) -> LocalSandboxClient:
    """One bubblewrap backend per process and parallelism: its limiter bounds the runs of every env at once."""
    if max_parallel not in _LOCAL_CLIENTS:
        _LOCAL_CLIENTS[max_parallel] = LocalSandboxClient(max_parallel=max_parallel)
    return _LOCAL_CLIENTS[max_parallel]


class CodeRepairEnv(Env):
    system_prompt = "You are a careful Python programmer. You fix buggy functions so that their tests pass."

    def __init__(self, sandbox: str = "local", url: str | None = None, max_parallel: int = 2,
                 invalid_penalty: float = 0.0, run_limits: dict[str, Any] | None = None):
        if sandbox not in ("local", "http"):
            raise ValueError(f"sandbox must be 'local' or 'http', got {sandbox!r}")
        if sandbox == "http" and not url:
            raise ValueError("sandbox='http' needs the server's url")
        self.sandbox, self.url, self.max_parallel = sandbox, url, max_parallel
        self.invalid_penalty = float(invalid_penalty)
        self.limits = Limits.from_dict(run_limits or {"cpu_time_s": 2.0, "wall_time_s": 5.0, "memory_mb": 256})
        self.task: dict[str, Any] = {}

    @classmethod
    def make_tasks(cls, split: str, count: int, seed: int, **args: Any) -> list[dict[str, Any]]:
        rng = random.Random(f"code-repair:{seed}:{split}")
        start = rng.randrange(len(TEMPLATES))
        return [make_task(start + i, rng) for i in range(count)]

    async def reset(self, task: dict[str, Any], seed: int) -> str:
        missing = {"fn", "code", "tests"} - set(task)
        if missing:
            raise KeyError(f"code repair task needs {sorted(missing)}")
        self.task = task
        report = await self._run(task["code"])
        return (f"This Python function is buggy:\n```python\n{task['code'].rstrip()}\n```\n\n"
                f"{self._failures(report)}\n\nFix it. {ASK}")

    async def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        code = extract_code(action_text, "python")
        if code is None:
            return f"No ```python code block found. {ASK}", self.invalid_penalty, False, {"invalid_action": True}
        report = await self._run(code)
        if report.all_passed:
            return "All tests pass.", 1.0, True, {"success": True, "pass_frac": 1.0}
        return (f"{self._failures(report)}\n\n{ASK}", 0.0, False,
                {"success": False, "pass_frac": report.pass_frac})

    async def _run(self, code: str) -> TestReport:
        client = (_local_client(self.max_parallel) if self.sandbox == "local"
                  else HTTPSandboxClient(self.url, timeout_s=self.limits.wall_time_s + 30))
        return await run_tests(client, code, {"format": "assert", "tests": self.task["tests"]}, "python",
                               self.limits)

    def _failures(self, report: TestReport) -> str:
        failing = [t for t, ok in zip(self.task["tests"], report.passed) if not ok]
        lines = "\n".join(failing) if failing else "(none)"
        why = f"\nFirst failure: {report.info}" if report.info else ""
        return f"Failing tests ({len(failing)} of {report.total}):\n{lines}{why}"
