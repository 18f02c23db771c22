"""Ending the parts of a run one by one, each even when an earlier one failed."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 60.0  # a part that does not end within this long is left to the guardians and Ray


def end_all(parts: list[tuple[str, Callable[[], object]]]) -> list[str]:
    """Calls every `(name, end)` in order; an exception is logged (with the part's name) and the next part still
    ends. Returns the names of the parts that failed. Cancellation (Ctrl-C again) propagates."""
    failed = []
    for name, end in parts:
        start = time.perf_counter()
        try:
            end()
        except Exception as err:
            failed.append(name)
            log.warning("closing %s failed: %s: %s", name, type(err).__name__, err)
        log.info("closed %s in %.2f s", name, time.perf_counter() - start)  # where a slow exit waits
    return failed
