"""The in-sandbox Python test harness (runs as the sandbox program, never on the host): loads `solution.py` as
the module `solution`, runs the test items of `tests.json`, and writes one report line per result to a private
duplicate of stdout, each behind a nonce the host generated for this run. Built by sandbox/testing.py.

The solution runs in this same process, so nothing here is out of its reach; what the design still gives:
  - Items of kind "expr" / "call" send back the *value* (exact builtin types only, encoded below) and the host
    compares it with the expected value, which never enters the sandbox: neither a forged report nor an
    always-equal object earns a pass without computing the right value.
  - Items of kind "exec" / "pytest" are judged here (no exception = pass). Before the solution is loaded the
    nonce file is read and deleted and the solution's stdout is pointed at stderr, so printing a fake report,
    exiting early (missing results are failures) or raising SystemExit does not pass a test; a program that
    deliberately digs the nonce out of this interpreter's memory (frames, gc) can forge these verdicts.
Standard library only, Python >= 3.8.
"""

import json
import math
import os
import signal
import sys
import traceback
import types

MARK = "@@rlvr-report"
_type = type
_isinstance = isinstance
_issubclass = issubclass
_len = len


class TestTimeout(BaseException):
    """Raised by SIGALRM in a test that runs past its time (a BaseException: `except Exception` misses it)."""


def _alarm(signum, frame):
    raise TestTimeout()


def encode(value, depth=0):
    """A JSON form of `value` that the host can rebuild exactly. Builtin types and their subclasses are encoded
    through the builtin's own C-level methods (an IntEnum becomes its int, a namedtuple its tuple, a Counter its
    dict), so an overridden __eq__ / __repr__ / __iter__ cannot impersonate another value; any other object
    becomes ["opaque", type name], which the host finds equal to nothing. type() (not isinstance, which trusts a
    forged __class__) decides."""
    t = _type(value)
    if depth > 60:
        return ["opaque", "too deeply nested"]
    if value is None:
        return ["none"]
    if t is bool:
        return ["bool", value]
    if _issubclass(t, int):
        return ["int", int.__repr__(value)]
    if _issubclass(t, float):
        return ["float", float.__repr__(value)]
    if _issubclass(t, complex):
        return ["complex", [float.__repr__(complex.__getattribute__(value, "real")),
                            float.__repr__(complex.__getattribute__(value, "imag"))]]
    if _issubclass(t, str):
        return ["str", str.__str__(value)]
    if _issubclass(t, bytes):
        return ["bytes", bytes.hex(value)]
    if _issubclass(t, list):
        return ["list", [encode(v, depth + 1) for v in list.__iter__(value)]]
    if _issubclass(t, tuple):
        return ["tuple", [encode(v, depth + 1) for v in tuple.__iter__(value)]]
    if _issubclass(t, frozenset):
        return ["frozenset", [encode(v, depth + 1) for v in frozenset.__iter__(value)]]
    if _issubclass(t, set):
        return ["set", [encode(v, depth + 1) for v in set.__iter__(value)]]
    if _issubclass(t, dict):
        return ["dict", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in dict.items(value)]]
    return ["opaque", t.__name__]


def _pytest_shim():
    """A tiny stand-in for the parts of pytest that test files use most (pytest itself is not in the sandbox)."""
    shim = types.ModuleType("pytest")

    class _Raises(object):
        def __init__(self, expected, match=None):
            self.expected, self.match, self.value = expected, match, None

        def __enter__(self):
            return self

        def __exit__(self, exc_type, exc, tb):
            if exc_type is None:
                raise AssertionError("DID NOT RAISE %r" % (self.expected,))
            if not issubclass(exc_type, self.expected):
                return False
            if self.match is not None:
                import re
                if not re.search(self.match, str(exc)):
                    raise AssertionError("pattern %r not found in %r" % (self.match, str(exc)))
            self.value = exc
            return True

    def raises(expected, *args, match=None, **kwargs):
        if args:
            with _Raises(expected, match):
                args[0](*args[1:], **kwargs)
            return None
        return _Raises(expected, match)

    class _Approx(object):
        def __init__(self, expected, rel=None, abs=None):
            self.expected, self.rel, self.abs = expected, 1e-6 if rel is None else rel, 1e-12 if abs is None else abs

        def _close(self, a, b):
            if _isinstance(b, (list, tuple)):
                return _isinstance(a, (list, tuple)) and _len(a) == _len(b) and all(
                    self._close(x, y) for x, y in zip(a, b))
            if _isinstance(b, dict):
                return _isinstance(a, dict) and a.keys() == b.keys() and all(self._close(a[k], b[k]) for k in b)
            try:
                return a == b or math.isclose(a, b, rel_tol=self.rel, abs_tol=self.abs)
            except TypeError:
                return False

        def __eq__(self, other):
            return self._close(other, self.expected)

        def __repr__(self):
            return "approx(%r)" % (self.expected,)

    class _Mark(object):
        def parametrize(self, argnames, argvalues, ids=None, **kwargs):
            names = [n.strip() for n in argnames.split(",")] if _isinstance(argnames, str) else list(argnames)

            def decorate(fn):
                fn.__dict__.setdefault("_rlvr_params", []).insert(0, (names, list(argvalues)))
                return fn
            return decorate

        def __getattr__(self, name):  # skip, xfail, slow, ...: accepted and ignored
            def mark(*args, **kwargs):
                if _len(args) == 1 and callable(args[0]) and not kwargs:
                    return args[0]
                return lambda fn: fn
            return mark

    def fail(msg=""):
        raise AssertionError(msg)

    def fixture(*args, **kwargs):
        if _len(args) == 1 and callable(args[0]):
            return args[0]
        return lambda fn: fn

    shim.raises, shim.approx, shim.mark, shim.fail, shim.fixture = raises, _Approx, _Mark(), fail, fixture
    # pytest.skip() would mark a test skipped; here it does nothing (the test runs on), so a solution that calls
    # it cannot turn a failing test into a non-failure.
    shim.skip = lambda msg="", **kwargs: None
    return shim


def _param_sets(fn):
    """Keyword sets for a test function: the product of its parametrize marks ([{}] when it has none)."""
    sets = [{}]
    for names, values in getattr(fn, "_rlvr_params", []):
        expanded = []
        for base in sets:
            for value in values:
                row = value if _len(names) > 1 else (value,)
                kwargs = dict(base)
                kwargs.update(zip(names, row))
                expanded.append(kwargs)
        sets = expanded
    return sets


def _short_error(exc):
    lines = traceback.format_exception_only(_type(exc), exc)
    return "".join(lines).strip()[-300:]


def main():
    with open(".nonce") as f:
        nonce = f.read().strip()
    os.unlink(".nonce")
    with open("tests.json") as f:
        spec = json.load(f)
    os.unlink("tests.json")
    report_fd = os.dup(1)  # the only way out for the report; the solution's stdout goes to stderr
    os.dup2(2, 1)
    prefix = ("%s %s " % (MARK, nonce)).encode()
    del nonce

    def emit(obj):
        data = prefix + json.dumps(obj).encode() + b"\n"
        while data:
            data = data[os.write(report_fd, data):]

    signal.signal(signal.SIGALRM, _alarm)
    timeout = float(spec.get("per_test_timeout_s", 5.0))
    sys.path.insert(0, os.getcwd())
    sys.modules["pytest"] = _pytest_shim()

    # Load the solution as the module `solution` (so `if __name__ == "__main__":` blocks do not run).
    module = types.ModuleType("solution")
    module.__file__ = os.path.join(os.getcwd(), "solution.py")
    sys.modules["solution"] = module
    try:
        with open("solution.py", encoding="utf-8") as f:
            source = f.read()
        code = compile(source, "solution.py", "exec")
    except SyntaxError as e:
        emit({"loaded": False, "syntax_error": True, "error": _short_error(e)})
        return
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        exec(code, module.__dict__)
        signal.setitimer(signal.ITIMER_REAL, 0)
    except BaseException as e:  # noqa: BLE001 - SystemExit and timeouts included: the solution did not load
        signal.setitimer(signal.ITIMER_REAL, 0)
        emit({"loaded": False, "syntax_error": False, "error": _short_error(e)})
        return
    emit({"loaded": True})

    namespace = module.__dict__
    if spec.get("pytest_source") is not None:
        namespace = dict(module.__dict__)
        namespace["__name__"] = "test_solution"
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout)
            exec(compile(spec["pytest_source"], "test_solution.py", "exec"), namespace)
            signal.setitimer(signal.ITIMER_REAL, 0)
        except BaseException as e:  # noqa: BLE001
            signal.setitimer(signal.ITIMER_REAL, 0)
            emit({"collect_error": _short_error(e)})
            return

    for i, item in enumerate(spec["items"]):
        result = {"i": i}
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout)
            result.update(_run_item(item, namespace))
            signal.setitimer(signal.ITIMER_REAL, 0)
        except TestTimeout:
            result.update(ok=False, error="timed out after %ss" % timeout)
        except BaseException as e:  # noqa: BLE001
            signal.setitimer(signal.ITIMER_REAL, 0)
            result.update(ok=False, error=_short_error(e))
        try:
            emit(result)
        except (TypeError, ValueError) as e:
            emit({"i": i, "ok": False, "error": "unreportable result: %s" % e})
    emit({"done": True})


def _run_item(item, namespace):
    kind = item["kind"]
    if kind == "expr":
        return {"value": encode(eval(item["src"], namespace))}
    if kind == "call":
        target = namespace
        fn = None
        for part in item["fn"].split("."):
            fn = target[part] if _isinstance(target, dict) else getattr(target, part)
            target = fn() if _isinstance(fn, _type) and part != item["fn"].split(".")[-1] else fn
        return {"value": encode(fn(*item.get("args", []), **item.get("kwargs", {})))}
    if kind == "exec":
        exec(compile(item["src"], "<test %d>" % item.get("index", 0), "exec"), namespace)
        return {"ok": True}
    if kind == "pytest":
        owner, _, name = item["name"].rpartition("::")
        if owner:
            fn = getattr(namespace[owner](), name)
        else:
            fn = namespace[name]
        for kwargs in _param_sets(fn):
            fn(**kwargs)
        return {"ok": True}
    raise ValueError("unknown item kind %r" % (kind,))


if __name__ == "__main__":
    main()
