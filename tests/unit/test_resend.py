"""rlvr.runtime.resend and rlvr.runtime.waiter: re-sends after a worker death, counted once per request and bounded
in time."""

from __future__ import annotations

import asyncio

import pytest
from ray.exceptions import ActorUnavailableError

from rlvr.runtime.resend import backoff_s, resend


def unavailable() -> ActorUnavailableError:
    return ActorUnavailableError("The actor is restarting", None)


def test_backoff_doubles_from_a_tenth_of_a_second_up_to_two():
    assert [backoff_s(k) for k in (1, 2, 3, 5, 6, 9)] == [0.1, 0.2, 0.4, 1.6, 2.0, 2.0]


def test_a_request_is_resent_until_it_gets_through_and_counted_once():
    attempts, counted = [], []

    async def send(attempt: int) -> str:
        attempts.append(attempt)
        if attempt < 3:  # died in flight, then refused twice while restarting
            raise unavailable()
        return "done"

    assert asyncio.run(resend(send, patience_s=60, on_resend=counted.append)) == "done"
    assert attempts == [0, 1, 2, 3] and len(counted) == 1


def test_past_its_patience_the_error_goes_to_the_caller():
    async def send(attempt: int) -> str:
        raise unavailable()

    with pytest.raises(ActorUnavailableError):
        asyncio.run(resend(send, patience_s=0.0, on_resend=lambda err: None))


def test_other_errors_are_not_resent():
    calls = []

    async def send(attempt: int) -> str:
        calls.append(attempt)
        raise ValueError("the call itself failed")

    with pytest.raises(ValueError):
        asyncio.run(resend(send, patience_s=60, on_resend=lambda err: None))
    assert calls == [0]
