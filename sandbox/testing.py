"""Test formats on top of the sandbox (DESIGN.md, sandbox/): turns a program plus its test cases into sandbox
runs and counts the passes.

Formats (`spec`, a dict or its JSON text):
  {"format": "assert", "tests": ["assert f(1) == 2", ...]}             Python; each string is one test
  {"format": "pytest", "tests": "def test_x(): ..."}                     Python; each test_* function (and
                                                                         Test*.test_* method) is one test
  {"format": "stdio", "cases": [{"stdin": "...", "stdout": "..."}]}      any language; one run per case
  {"format": "call", "fn": "name", "cases": [{"args": [...], "kwargs": {}, "output": ...}]}
                                                                         Python; `fn` may be "Class.method"
Optional in every spec: "per_test_timeout_s" (harness formats; default: the run's cpu_time_s).

Where each verdict is decided (the threat model; see sandbox/_harness.py):
  - stdio, call, and asserts of the form `assert <expr> == <literal>` (or `<literal> == <expr>`, or
    `<expr> is None/True/False`): the program's output / value comes back and is compared here, with the
    expected value never sent into the sandbox. A forged report cannot pass these without the right answer.
  - other asserts and pytest functions: judged inside the sandbox by the harness, in the program's own
    process. The report travels behind a per-run nonce on a private descriptor, which defeats printing a fake
    report, exiting early and always-equal objects, not a program written to dig the nonce out of the harness.
"""

from __future__ import annotations

import ast
import asyncio
import json
import math
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sandbox.types import Limits, RunRequest, RunResult

HARNESS_SOURCE = (Path(__file__).with_name("_harness.py")).read_text()
REPORT_MARK = "@@rlvr-report"
FORMATS = ("assert", "pytest", "stdio", "call")


class _Client(Protocol):
    async def run(self, request: RunRequest) -> RunResult: ...


class SandboxInfrastructureError(RuntimeError):
    """The sandbox itself failed (status sandbox_error): no verdict about the program can be drawn."""


@dataclass
class TestReport:
    passed: list[bool]  # one entry per test case, in order
    compiled: bool  # C/C++: compiled; Python: parsed (no SyntaxError)
    info: str = ""  # why the first failing test failed, or a summary
    statuses: list[str] = field(default_factory=list)  # sandbox status per run

    @property
    def total(self) -> int:
        return len(self.passed)

    @property
    def pass_frac(self) -> float:
        return sum(self.passed) / len(self.passed) if self.passed else 0.0

    @property
    def all_passed(self) -> bool:
        return bool(self.passed) and all(self.passed)


def parse_spec(spec: Any, language: str = "python") -> dict:
    """Validates a test spec (dict or JSON text); raises ValueError naming what is wrong."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError as e:
            raise ValueError(f"test spec is not valid JSON: {e}") from None
    if not isinstance(spec, dict):
        raise ValueError(f"test spec must be an object, got {type(spec).__name__}")
    fmt = spec.get("format")
    if fmt not in FORMATS:
        raise ValueError(f"test spec format must be one of {list(FORMATS)}, got {fmt!r}")
    if fmt != "stdio" and language != "python":
        raise ValueError(f"format {fmt!r} needs language python, not {language!r}")
    if fmt == "assert":
        tests = spec.get("tests")
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
            raise ValueError("assert format needs 'tests': a non-empty list of strings")
    elif fmt == "pytest":
        if not isinstance(spec.get("tests"), str):
            raise ValueError("pytest format needs 'tests': the test module's source")
    else:
        cases = spec.get("cases")
        if not isinstance(cases, list) or not cases or not all(isinstance(c, dict) for c in cases):
            raise ValueError(f"{fmt} format needs 'cases': a non-empty list of objects")
        if fmt == "stdio" and not all(isinstance(c.get("stdout"), str) for c in cases):
            raise ValueError("every stdio case needs a string 'stdout'")
        if fmt == "call":
            if not isinstance(spec.get("fn"), str) or not spec["fn"]:
                raise ValueError("call format needs 'fn': the function's name")
            for c in cases:
                if "output" not in c or not isinstance(c.get("args", []), list) or not isinstance(
                    c.get("kwargs", {}), dict
                ):
                    raise ValueError("every call case needs 'output', and 'args' a list / 'kwargs' an object")
    return spec


async def run_tests(client: _Client, code: str, spec: Any, language: str = "python",
                    limits: Limits | None = None) -> TestReport:
    """Runs `code` against `spec` through `client`. Raises SandboxInfrastructureError when a run comes back
    sandbox_error, ValueError for a bad spec; a failing program is a report, not an exception."""
    spec = parse_spec(spec, language)
    limits = limits or Limits()
    if spec["format"] == "stdio":
        return await _run_stdio(client, code, spec, language, limits)
    items, expected = _harness_items(spec)
    timeout = float(spec.get("per_test_timeout_s", limits.cpu_time_s))
    nonce = secrets.token_hex(16)
    tests = {"items": items, "per_test_timeout_s": timeout}
    if spec["format"] == "pytest":
        tests["pytest_source"] = spec["tests"]
    request = RunRequest(
        "python", HARNESS_SOURCE, files={"solution.py": code, "tests.json": json.dumps(tests), ".nonce": nonce},
        limits=limits,
    )
    result = await client.run(request)
    if result.status == "sandbox_error":
        raise SandboxInfrastructureError(f"sandbox error: {result.stderr[-500:]}")
    return _judge_report(result, nonce, expected, spec["format"])


# -- harness formats -------------------------------------------------------------------------------------------

_NO_EXPECTED = object()


def _harness_items(spec: dict) -> tuple[list[dict], list[Any]]:
    """(items for the harness, expected value per item or _NO_EXPECTED when the harness judges it)."""
    fmt = spec["format"]
    if fmt == "call":
        items = [{"kind": "call", "fn": spec["fn"], "args": c.get("args", []), "kwargs": c.get("kwargs", {})}
                 for c in spec["cases"]]
        return items, [("json", c["output"]) for c in spec["cases"]]
    if fmt == "pytest":
        names = pytest_test_names(spec["tests"])
        if not names:
            raise ValueError("pytest format: no test_* functions found in 'tests'")
        return [{"kind": "pytest", "name": n} for n in names], [_NO_EXPECTED] * len(names)
    items, expected = [], []
    for index, test in enumerate(spec["tests"]):
        split = split_assert(test)
        if split is None:
            items.append({"kind": "exec", "src": test, "index": index})
            expected.append(_NO_EXPECTED)
        else:
            src, op, value = split
            items.append({"kind": "expr", "src": src})
            expected.append((op, value))
    return items, expected


def split_assert(test: str) -> tuple[str, str, Any] | None:
    """`assert <expr> == <literal>` -> (expr source, "==", literal); also `<literal> == <expr>` and
    `<expr> is None/True/False` (op "is"). None for anything else (judged inside the sandbox)."""
    try:
        tree = ast.parse(test)
    except SyntaxError:
        raise ValueError(f"test does not parse: {test[:200]!r}") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None
    node = tree.body[0].test
    if not isinstance(node, ast.Compare) or len(node.ops) != 1:
        return None
    left, right, op = node.left, node.comparators[0], node.ops[0]
    if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and (
        right.value is None or isinstance(right.value, bool)
    ):
        return ast.unparse(left), "is", right.value
    if not isinstance(op, ast.Eq):
        return None
    for expr, literal in ((left, right), (right, left)):
        try:
            value = ast.literal_eval(literal)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        return ast.unparse(expr), "==", value
    return None


def pytest_test_names(source: str) -> list[str]:
    """Top-level `test*` functions and `Test*` classes' `test*` methods, in file order ("Class::method")."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise ValueError(f"pytest tests do not parse: {e}") from None
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            names.append(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names += [f"{node.name}::{m.name}" for m in node.body
                      if isinstance(m, ast.FunctionDef) and m.name.startswith("test")]
    return names


def parse_report(stdout: str, nonce: str) -> tuple[dict[str, Any], str]:
    """The harness's lines for this nonce: ({"loaded": ..., "results": {i: line}, "done": bool, ...}, problem).
    Anything doubled (two results for one test, two load lines) marks the report as tampered with."""
    prefix = f"{REPORT_MARK} {nonce} "
    report: dict[str, Any] = {"results": {}}
    for line in stdout.splitlines():
        if not line.startswith(prefix):
            continue
        try:
            entry = json.loads(line[len(prefix):])
        except ValueError:
            return report, "unreadable report line"
        if not isinstance(entry, dict):
            return report, "unreadable report line"
        if "i" in entry:
            i = entry["i"]
            if not isinstance(i, int) or i in report["results"]:
                return report, "report tampered with (a result twice)"
            report["results"][i] = entry
        else:
            for key, value in entry.items():
                if key in report:
                    return report, f"report tampered with ({key!r} twice)"
                report[key] = value
    return report, ""


def _judge_report(result: RunResult, nonce: str, expected: list[Any], fmt: str) -> TestReport:
    n = len(expected)
    report, problem = parse_report(result.stdout, nonce)
    if problem:
        return TestReport([False] * n, True, problem, [result.status])
    if not report.get("loaded"):
        if "loaded" in report:
            return TestReport([False] * n, not report.get("syntax_error"),
                              f"solution failed to load: {report.get('error', '')}", [result.status])
        return TestReport([False] * n, True, f"no report from the harness ({result.status}): "
                          f"{result.stderr[-300:]}", [result.status])
    if "collect_error" in report:
        return TestReport([False] * n, True, f"tests failed to load: {report['collect_error']}", [result.status])
    passed, first_failure = [], ""
    for i, want in enumerate(expected):
        entry = report["results"].get(i)
        ok, why = _verdict(entry, want, fmt)
        passed.append(ok)
        if not ok and not first_failure:
            first_failure = f"test {i}: {why}"
    if not report.get("done") and not all(passed):
        first_failure += f" (run ended early: {result.status})"
    info = first_failure or f"{n}/{n} passed"
    return TestReport(passed, True, info, [result.status])


def _verdict(entry: dict | None, want: Any, fmt: str) -> tuple[bool, str]:
    if entry is None:
        return False, "no result (the run ended before this test)"
    if want is _NO_EXPECTED:
        return entry.get("ok") is True, entry.get("error", "")
    if "value" not in entry:
        return False, entry.get("error", "no value")
    try:
        got = decode(entry["value"])
    except (ValueError, TypeError, KeyError, IndexError, RecursionError) as e:
        return False, f"undecodable value: {e}"
    op, value = want
    if op == "json":
        ok = _json_equal(got, value)
    elif op == "is":
        ok = got is value
    else:
        try:
            ok = bool(got == value)
        except Exception:  # noqa: BLE001 - only builtin types here, but comparisons can still raise
            ok = False
    return ok, "" if ok else f"got {_short(got)}, expected {_short(value)}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


class _Opaque:
    """Stands for a value of a type that cannot be rebuilt outside the sandbox: equal to nothing."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: Any) -> bool:
        return False

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<{self.name} object>"


def decode(node: Any) -> Any:
    """Rebuilds a value encoded by the harness (`encode` in sandbox/_harness.py)."""
    tag = node[0]
    if tag == "none":
        return None
    if tag == "bool":
        return bool(node[1])
    if tag == "int":
        text = node[1]
        if len(text) > 5000:
            raise ValueError("integer too long")
        return int(text)
    if tag == "float":
        return float(node[1])
    if tag == "complex":
        return complex(float(node[1][0]), float(node[1][1]))
    if tag == "str":
        return str(node[1])
    if tag == "bytes":
        return bytes.fromhex(node[1])
    if tag == "list":
        return [decode(v) for v in node[1]]
    if tag == "tuple":
        return tuple(decode(v) for v in node[1])
    if tag in ("set", "frozenset"):
        items = [decode(v) for v in node[1]]
        return set(items) if tag == "set" else frozenset(items)
    if tag == "dict":
        return {decode(k): decode(v) for k, v in node[1]}
    if tag == "opaque":
        return _Opaque(str(node[1]))
    raise ValueError(f"unknown tag {tag!r}")


def _json_equal(got: Any, want: Any) -> bool:
    """Equality for JSON-described outputs: tuples match lists, floats match within 1e-9 (relative)."""
    if isinstance(got, _Opaque):
        return False
    if isinstance(want, bool) or isinstance(got, bool):
        return isinstance(want, bool) and isinstance(got, bool) and got == want
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        if isinstance(want, int) and isinstance(got, int):
            return got == want
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12) or got == want
    if isinstance(want, (list, tuple)):
        return isinstance(got, (list, tuple)) and len(got) == len(want) and all(
            _json_equal(g, w) for g, w in zip(got, want))
    if isinstance(want, dict):
        return isinstance(got, dict) and set(map(str, got)) == set(map(str, want)) and len(got) == len(want) and all(
            _json_equal(got[k] if k in got else _lookup_str_key(got, k), w) for k, w in want.items())
    try:
        return bool(got == want)
    except Exception:  # noqa: BLE001
        return False


def _lookup_str_key(mapping: dict, key: str) -> Any:
    for k, v in mapping.items():
        if str(k) == key:
            return v
    return _Opaque("missing")


# -- stdio -----------------------------------------------------------------------------------------------------


def normalize_output(text: str) -> list[str]:
    """Lines with trailing whitespace removed, without leading/trailing blank lines."""
    return [line.rstrip() for line in text.strip().splitlines()]


async def _run_stdio(client: _Client, code: str, spec: dict, language: str, limits: Limits) -> TestReport:
    cases = spec["cases"]

    async def one(case: dict) -> RunResult:
        result = await client.run(RunRequest(language, code, stdin=str(case.get("stdin", "")), limits=limits))
        if result.status == "sandbox_error":
            raise SandboxInfrastructureError(f"sandbox error: {result.stderr[-500:]}")
        return result

    # The first case alone: a program that does not compile fails them all without n compilations.
    first = await one(cases[0])
    if first.status == "compile_error":
        return TestReport([False] * len(cases), False, f"compile error: {first.stderr[-300:]}", ["compile_error"])
    tasks = [asyncio.ensure_future(one(case)) for case in cases[1:]]
    try:
        rest = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:  # one failed (or we were cancelled): the others' sandboxes are not needed
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    results = [first, *rest]
    passed, info = [], ""
    for i, (case, result) in enumerate(zip(cases, results)):
        ok = result.status == "ok" and normalize_output(result.stdout) == normalize_output(case["stdout"])
        passed.append(ok)
        if not ok and not info:
            why = result.status if result.status != "ok" else f"wrong output {_short(result.stdout[:200])}"
            detail = result.stderr.strip().splitlines()[-1:] if result.status != "ok" else []
            info = f"case {i}: {why}" + (f" ({detail[0][:200]})" if detail else "")
    compiled = True
    if language == "python":
        compiled = not all(r.status == "runtime_error" and "SyntaxError" in r.stderr for r in results)
    return TestReport(passed, compiled, info or f"{len(cases)}/{len(cases)} passed", [r.status for r in results])
