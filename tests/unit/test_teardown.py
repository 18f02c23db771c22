"""end_all: every part of a run is ended even when an earlier one fails; Ctrl-C during it still propagates."""

import pytest

from rlvr.lifecycle.teardown import end_all


def test_every_part_ends_and_failures_are_named(caplog):
    ended = []

    def broken():
        raise RuntimeError("actor is dead")

    failed = end_all([("a", lambda: ended.append("a")), ("b", broken), ("c", lambda: ended.append("c"))])
    assert ended == ["a", "c"] and failed == ["b"]
    assert "closing b failed: RuntimeError: actor is dead" in caplog.text


def test_a_second_ctrl_c_is_not_swallowed():
    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        end_all([("a", interrupted)])
