"""The test tooling that starts a slow fixture's object in a thread (tests/helpers/early_start.py): what it built
is handed over once, what it raised fails the test that takes it, and what no test took is closed."""

import threading

import pytest

from tests.helpers.early_start import EarlyStart


def test_take_hands_over_what_was_built_once():
    go = threading.Event()
    early = EarlyStart(lambda x: go.wait(5) and x * 2)
    assert not early.started
    early.begin(21)
    assert early.started
    go.set()
    assert early.take() == 42 and not early.started
    with pytest.raises(RuntimeError, match="taken already"):
        early.take()
    with pytest.raises(RuntimeError, match="twice"):
        early.begin(1)


def test_what_the_build_raised_fails_the_taker():
    def build():
        raise ValueError("engine failed to start")

    early = EarlyStart(build)
    early.begin()
    with pytest.raises(ValueError, match="engine failed to start"):
        early.take()


def test_discard_closes_what_no_test_took_and_only_that():
    closed = []
    early = EarlyStart(lambda: "engine")
    early.begin()
    early.discard(closed.append)
    assert closed == ["engine"] and not early.started
    taken = EarlyStart(lambda: "engine")
    taken.begin()
    taken.take()
    taken.discard(closed.append)
    EarlyStart(lambda: "engine").discard(closed.append)  # never begun
    assert closed == ["engine"]
