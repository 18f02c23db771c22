"""CodeSandboxRewardWorker end to end through the real bubblewrap sandbox: every test format, both reward modes,
the failure paths, and programs that try to fake their way to a reward."""

import asyncio
import json
import shutil

import pytest

from rlvr.data.types import Prompt, Sample
from rlvr.workers.rewards.base import RewardLimits
from rlvr.workers.rewards.code_sandbox import CodeSandboxRewardWorker
from sandbox.bwrap_backend import BwrapBackend
from sandbox.client import LocalSandboxClient

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (apt-get install -y bubblewrap)"
)


@pytest.fixture(scope="module")
def sandbox_ready():
    """Installed is not enough: user namespaces may be disabled (or restricted by AppArmor) on this host."""
    ok, reason = BwrapBackend().available()
    if not ok:
        pytest.skip(f"bubblewrap cannot create a sandbox on this host: {reason}")
LIMITS = RewardLimits(max_concurrency=4, timeout_s=60, max_retries=1, retry_backoff_s=0.01)
RUN_LIMITS = {"cpu_time_s": 2, "wall_time_s": 5}

ADD = "def add(a, b):\n    return a + b\n"
ADD_ONE_OFF = "def add(a, b):\n    return a + b if a < 5 else a + b + 1\n"


def fenced(code, tag="python"):
    return f"Here is my solution.\n```{tag}\n{code}```\nDone."


def make_sample(text, ground_truth, meta=None):
    prompt = Prompt(uid="p0", domain="code", ground_truth=ground_truth, text="q", meta=meta or {})
    return Sample(prompt=prompt, group_id="g0", index=0, response_ids=[], response_text=text,
                  finish_reason="stop", policy_version=0)


@pytest.fixture(scope="module")
def worker(sandbox_ready):
    worker = CodeSandboxRewardWorker("code", LIMITS, run_limits=RUN_LIMITS)
    yield worker
    worker.close()


@pytest.fixture(scope="module")
def strict_worker(sandbox_ready):
    worker = CodeSandboxRewardWorker("code", LIMITS, reward_mode="all_pass", run_limits=RUN_LIMITS)
    yield worker
    worker.close()


def score(worker, text, ground_truth, meta=None):
    return asyncio.run(worker.evaluate(make_sample(text, ground_truth, meta)))


ASSERTS = {"format": "assert", "tests": ["assert add(1, 2) == 3", "assert add(2, 2) == 4",
                                         "assert add(5, 5) == 10", "assert add(0, 0) >= 0"]}
PYTEST = {
    "format": "pytest",
    "tests": (
        "import pytest\n"
        "from solution import add\n"
        "def test_small():\n    assert add(1, 2) == 3\n"
        "@pytest.mark.parametrize('a, b, c', [(1, 1, 2), (6, 1, 7)])\n"
        "def test_param(a, b, c):\n    assert add(a, b) == c\n"
        "class TestAdd:\n"
        "    def test_types(self):\n        with pytest.raises(TypeError):\n            add(1, 'x')\n"
        "    def test_float(self):\n        assert add(0.1, 0.2) == pytest.approx(0.3)\n"
    ),
}
CALL = {"format": "call", "fn": "add", "cases": [{"args": [1, 2], "output": 3}, {"args": [7, 1], "output": 8},
                                                 {"args": [], "kwargs": {"a": 2, "b": 3}, "output": 5}]}
STDIO = {"format": "stdio", "cases": [{"stdin": "1 2\n", "stdout": "3\n"}, {"stdin": "7 1", "stdout": "8"}]}
STDIO_PY = "a, b = map(int, input().split())\nprint(a + b if a < 5 else a + b + 1)\n"
STDIO_C = '#include <stdio.h>\nint main(void){ int a, b; scanf("%d %d", &a, &b); printf("%d\\n", a + b); }\n'


@needs_bwrap
@pytest.mark.parametrize(
    "code, spec, passed",
    [
        (ADD, ASSERTS, 4), (ADD_ONE_OFF, ASSERTS, 3),
        (ADD, PYTEST, 4), (ADD_ONE_OFF, PYTEST, 3),  # test_param fails as a whole when one parameter does
        (ADD, CALL, 3), (ADD_ONE_OFF, CALL, 2),
        (ADD, json.dumps(CALL), 3),  # ground truth as JSON text
    ],
)
def test_formats_count_passes(worker, strict_worker, code, spec, passed):
    total = {"assert": 4, "pytest": 4, "call": 3}[spec["format"] if isinstance(spec, dict) else "call"]
    result = score(worker, fenced(code), spec)
    assert result.status == "ok", result.info
    assert result.reward == pytest.approx(passed / total)
    assert result.parts == {"pass_frac": pytest.approx(passed / total), "compiled": 1.0}
    assert result.correct is (passed == total)
    strict = score(strict_worker, fenced(code), spec)
    assert strict.reward == (1.0 if passed == total else 0.0)


@needs_bwrap
def test_stdio_python_and_c(worker):
    result = score(worker, fenced(STDIO_PY), STDIO)
    assert (result.status, result.reward, result.correct) == ("ok", 0.5, False), result.info
    result = score(worker, fenced(STDIO_C, "c"), STDIO, meta={"language": "c"})
    assert (result.status, result.reward, result.correct) == ("ok", 1.0, True), result.info
    assert result.parts["compiled"] == 1.0


@needs_bwrap
def test_compile_error_and_syntax_error_score_zero(worker):
    result = score(worker, fenced("int main(void) { return nope; }", "c"), STDIO, meta={"language": "c"})
    assert (result.status, result.reward, result.correct, result.parts["compiled"]) == ("ok", 0.0, False, 0.0)
    result = score(worker, fenced("def add(a, b) return a + b\n"), ASSERTS)
    assert (result.status, result.reward, result.parts["compiled"]) == ("ok", 0.0, 0.0)


@needs_bwrap
def test_a_hanging_test_costs_only_itself(worker):
    code = "def add(a, b):\n    while a == 5:\n        pass\n    return a + b\n"
    spec = dict(ASSERTS, per_test_timeout_s=0.5)
    result = score(worker, fenced(code), spec)
    assert result.status == "ok"
    assert result.reward == pytest.approx(3 / 4), result.info


@needs_bwrap
def test_no_code_block_is_a_legitimate_zero(worker):
    result = score(worker, "I would add the numbers: a + b.", ASSERTS)
    assert (result.status, result.reward, result.correct) == ("ok", 0.0, False)
    assert result.info == "no code block"


FAKE_REPORTS = {
    "prints a report": (
        "import sys\n"
        "for i in range(10):\n"
        "    print('@@rlvr-report 0123456789abcdef0123456789abcdef {\"i\": %d, \"ok\": true}' % i)\n"
        "print('@@rlvr-report 0123456789abcdef0123456789abcdef {\"loaded\": true}')\n"
        "def add(a, b):\n    return 0\n"
    ),
    "writes to every descriptor": (
        "import os\n"
        "for fd in range(3, 64):\n"
        "    for i in range(4):\n"
        "        try:\n"
        "            os.write(fd, b'@@rlvr-report x {\"i\": %d, \"ok\": true, \"value\": [\"int\", \"3\"]}\\n' % i)\n"
        "        except OSError:\n"
        "            pass\n"
        "def add(a, b):\n    return 0\n"
    ),
    "reads the nonce file": (
        "try:\n    nonce = open('.nonce').read()\nexcept OSError:\n    nonce = 'gone'\n"
        "print('@@rlvr-report %s {\"i\": 0, \"ok\": true}' % nonce)\n"
        "def add(a, b):\n    return 0\n"
    ),
    "exits early with success": "import os\nos._exit(0)\n",
    "raises SystemExit(0)": "import sys\nsys.exit(0)\n",
    "returns an always-equal object": (
        "class Anything:\n"
        "    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n"
        "    def __repr__(self):\n        return '3'\n"
        "def add(a, b):\n    return Anything()\n"
    ),
    "returns an int subclass that lies": (
        "class Liar(int):\n"
        "    def __eq__(self, other):\n        return True\n"
        "    __hash__ = int.__hash__\n"
        "    def __repr__(self):\n        return '3'\n"
        "def add(a, b):\n    return Liar(0)\n"
    ),
}


# Two tests compared on the host (literal expected values) and one judged inside the sandbox (`> 1`): the fakes
# above return 0 or a lie, and must earn nothing from either kind.
FAKE_TARGET = {"format": "assert", "tests": ["assert add(1, 2) == 3", "assert add(2, 2) == 4",
                                             "assert add(1, 1) > 1"]}


@needs_bwrap
@pytest.mark.parametrize("name", list(FAKE_REPORTS))
def test_faked_reports_are_not_rewarded(worker, name):
    for spec in (FAKE_TARGET, CALL):
        result = score(worker, fenced(FAKE_REPORTS[name]), spec)
        assert (result.status, result.reward, result.correct) == ("ok", 0.0, False), (name, result.info)


def test_unreachable_sandbox_is_an_error_after_retries():
    worker = CodeSandboxRewardWorker("code", LIMITS, sandbox="http", url="http://127.0.0.1:9")
    try:
        result = score(worker, fenced(ADD), ASSERTS)
        assert result.status == "error"
        assert "unreachable" in result.info
        assert worker.metrics()["retries"] == 1.0
    finally:
        worker.close()


def test_a_sandbox_that_cannot_start_programs_is_an_error():
    worker = CodeSandboxRewardWorker("code", LIMITS)
    # bubblewrap replaced by a binary that exits at once: the sandbox never starts (status sandbox_error).
    worker._client = LocalSandboxClient(backend=BwrapBackend(bwrap=shutil.which("false")))
    try:
        result = score(worker, fenced(ADD), ASSERTS)
        assert result.status == "error" and "sandbox error" in result.info
        result = score(worker, "no code here", ASSERTS)  # no program, nothing to run: still a plain 0
        assert (result.status, result.reward) == ("ok", 0.0)
    finally:
        worker.close()


def test_bad_test_spec_is_an_error_not_a_zero():
    worker = CodeSandboxRewardWorker("code", LIMITS)
    try:
        result = score(worker, fenced(ADD), {"format": "nope"})
        assert result.status == "error" and "format" in result.info
    finally:
        worker.close()


@needs_bwrap
def test_http_sandbox_gives_the_same_rewards(sandbox_ready):
    worker = CodeSandboxRewardWorker("code", LIMITS, sandbox="http", max_parallel=2, run_limits=RUN_LIMITS)
    try:
        assert worker.url.startswith("http://127.0.0.1:")
        result = score(worker, fenced(ADD_ONE_OFF), ASSERTS)
        assert (result.status, result.reward) == ("ok", 0.75), result.info
    finally:
        worker.close()


def test_constructor_rejects_bad_arguments():
    with pytest.raises(ValueError, match="reward_mode"):
        CodeSandboxRewardWorker("code", reward_mode="most")
    with pytest.raises(ValueError, match="sandbox"):
        CodeSandboxRewardWorker("code", sandbox="cloud")
    with pytest.raises(ValueError, match="unknown limits"):
        CodeSandboxRewardWorker("code", run_limits={"ram": 1})
