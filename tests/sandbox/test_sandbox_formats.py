"""The sandbox's pure parts (no bubblewrap needed): wire types, status classification, test-format parsing, the
value encoding shared by harness and host, and the seccomp program's shape."""

import math
import signal
import struct

import pytest

from sandbox import _harness, seccomp
from sandbox.bwrap_backend import classify
from sandbox.testing import (
    _json_equal, decode, normalize_output, parse_report, parse_spec, pytest_test_names, split_assert,
)
from sandbox.types import Limits, RunRequest, RunResult

LIMITS = Limits(cpu_time_s=2, wall_time_s=5, memory_mb=128)


def test_types_round_trip_and_validate():
    request = RunRequest("cpp", "int main(){}", stdin="1", files={"a/b.h": "x"}, limits=Limits(memory_mb=64))
    assert RunRequest.from_dict(request.to_dict()) == request
    result = RunResult("timeout", "out", "err", 137, 1.5)
    assert RunResult.from_dict(result.to_dict()) == result
    for bad in ["/etc/x", "../x", "a/../b", "", "a//b", "main.cpp"]:
        with pytest.raises(ValueError):
            RunRequest("cpp", "x", files={bad: ""})
    with pytest.raises(ValueError, match="max_processes"):
        Limits.from_dict({"max_processes": 1.5})
    with pytest.raises(ValueError, match="cpu_time_s"):
        Limits.from_dict({"cpu_time_s": float("inf")})
    with pytest.raises(ValueError, match="unknown"):
        RunResult.from_dict({"status": "exploded"})


def event(**exit_fields):
    base = {"returncode": 0, "signal": None, "cpu_s": 0.1, "wall_s": 0.1, "killed": None}
    return {"started": {}, "running": {}, "exit": {**base, **exit_fields}}


@pytest.mark.parametrize(
    "events, killed_by_host, stderr, expected",
    [
        (event(), None, "", ("ok", 0)),
        (event(returncode=3), None, "", ("runtime_error", 3)),
        (event(returncode=None, signal=signal.SIGXCPU, cpu_s=2.0), None, "", ("timeout", 128 + signal.SIGXCPU)),
        (event(returncode=None, signal=signal.SIGKILL, cpu_s=3.0), None, "", ("timeout", 137)),
        (event(returncode=None, signal=signal.SIGKILL, killed="wall"), None, "", ("timeout", 137)),
        (event(returncode=None, signal=signal.SIGKILL, killed="memory"), None, "", ("memory_limit", 137)),
        (event(returncode=1), None, "Traceback ...\nMemoryError\n", ("memory_limit", 1)),
        (event(returncode=None, signal=signal.SIGABRT), None, "what(): std::bad_alloc", ("memory_limit", 134)),
        (event(returncode=None, signal=signal.SIGSEGV), None, "", ("runtime_error", 139)),
        (event(returncode=None, signal=signal.SIGSEGV, maxrss_kb=120 * 1024), None, "", ("memory_limit", 139)),
        (event(returncode=None, signal=signal.SIGKILL), "output", "", ("output_limit", 137)),
        (event(), "wall", "", ("timeout", 0)),
        ({"started": {}, "running": {}}, None, "", ("runtime_error", None)),  # the program killed the supervisor
        ({}, None, "bwrap: No permissions", ("sandbox_error", None)),
        ({"started": {}, "compiled": {"ok": False, "output": "error"}}, None, "", ("compile_error", None)),
        ({"started": {}, "running": {}, "exit": {"error": "no such file"}}, None, "", ("sandbox_error", None)),
    ],
)
def test_classify(events, killed_by_host, stderr, expected):
    status, exit_code, _ = classify(events, killed_by_host, stderr, LIMITS)
    assert (status, exit_code) == expected


@pytest.mark.parametrize(
    "test, expected",
    [
        ("assert f(1) == 2", ("f(1)", "==", 2)),
        ("assert [1, 2] == g(x=3)", ("g(x=3)", "==", [1, 2])),
        ("assert f('a') == {'a': (1, -2.5)}, 'message'", ("f('a')", "==", {"a": (1, -2.5)})),
        ("assert f() is None", ("f()", "is", None)),
        ("assert f() is True", ("f()", "is", True)),
        ("assert f(1) == g(1)", None),
        ("assert f(1) > 2", None),
        ("assert f(1)", None),
        ("x = f(1)\nassert x == 2", None),
        ("assert f(1) == 2 == 2", None),
        ("assert f() is 0", None),
    ],
)
def test_split_assert(test, expected):
    assert split_assert(test) == expected


def test_split_assert_rejects_unparsable_tests():
    with pytest.raises(ValueError, match="does not parse"):
        split_assert("assert f(1) ==")


def test_pytest_test_names():
    source = "def test_a(): pass\ndef helper(): pass\nclass TestB:\n    def test_c(self): pass\n    def d(self): pass\n"
    assert pytest_test_names(source) == ["test_a", "TestB::test_c"]


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -5, 10**30, 1.5, float("inf"), "text", b"\x00\xff", [1, [2]], (1, (2,)), {1, 2},
     frozenset({3}), {"a": [1, {"b": None}]}, {(1, 2): 3}, 1 + 2j],
)
def test_encode_decode_round_trip(value):
    assert decode(_harness.encode(value)) == value
    assert type(decode(_harness.encode(value))) is type(value)


def test_encode_sees_through_subclasses_and_refuses_other_objects():
    class Liar(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    class Anything:
        def __eq__(self, other):
            return True

    assert decode(_harness.encode(Liar(7))) == 7
    assert decode(_harness.encode(Liar(7))) != 8
    assert decode(_harness.encode(Anything())) != Anything()
    assert math.isnan(decode(_harness.encode(float("nan"))))


def test_json_equality_for_call_outputs():
    assert _json_equal((1, 2), [1, 2])
    assert _json_equal(0.1 + 0.2, 0.3)
    assert not _json_equal(1, True) and not _json_equal(True, 1)
    assert _json_equal({1: "a"}, {"1": "a"})
    assert not _json_equal([1, 2], [1, 2, 3])


def test_parse_report_takes_only_this_nonce_and_refuses_duplicates():
    nonce = "abc"
    stdout = ("@@rlvr-report abc {\"loaded\": true}\n@@rlvr-report zzz {\"i\": 1, \"ok\": true}\n"
              "noise\n@@rlvr-report abc {\"i\": 0, \"ok\": true}\n")
    report, problem = parse_report(stdout, nonce)
    assert problem == "" and report["loaded"] is True and list(report["results"]) == [0]
    _, problem = parse_report(stdout + "@@rlvr-report abc {\"i\": 0, \"ok\": false}\n", nonce)
    assert "tampered" in problem


def test_parse_spec():
    assert parse_spec('{"format": "stdio", "cases": [{"stdin": "", "stdout": "1"}]}', "c")["format"] == "stdio"
    with pytest.raises(ValueError, match="needs language python"):
        parse_spec({"format": "assert", "tests": ["assert 1"]}, "c")
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_spec("{", "python")
    with pytest.raises(ValueError, match="output"):
        parse_spec({"format": "call", "fn": "f", "cases": [{"args": [1]}]})


def test_normalize_output():
    assert normalize_output("\n1 2  \n3\r\n\n") == ["1 2", "3"]


def test_seccomp_program_shape():
    for machine in ("x86_64", "aarch64"):
        program = seccomp.build(machine)
        instructions = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
        assert instructions[-3:] == [(0x06, 0, 0, 0x7FFF0000), (0x06, 0, 0, 0x00050001), (0x06, 0, 0, 0x80000000)]
        for index, (code, jt, jf, _) in enumerate(instructions):
            if code in (0x15, 0x35):  # every jump lands inside the program
                assert index + 1 + max(jt, jf) < len(instructions)
    assert seccomp.build("riscv64") is None
