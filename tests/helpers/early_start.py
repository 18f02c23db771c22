"""Starting a slow fixture's object early, in a thread, while other tests run.

The vLLM engine of the engine contract takes about 35 s to start on a 2-core box, nearly all of it in its own
EngineCore process (imports, model load, KV-cache set-up) while the test process only waits on a socket. Started
at the contract tier's first test and taken when its tests come (the tier's last, tests/contract/conftest.py), that
wait overlaps the other contract tests instead of adding to the tier's time.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import pytest


class EarlyStart:
    """One object built in a background thread: `begin(*args)` starts `build(*args)`, `take()` waits for it and
    hands it over once (re-raising what `build` raised), `discard(close)` closes one that no test took."""

    def __init__(self, build: Callable[..., Any]) -> None:
        self.build = build
        self._thread: threading.Thread | None = None
        self._result: Any = None
        self._error: BaseException | None = None
        self._taken = False

    @property
    def started(self) -> bool:
        return self._thread is not None and not self._taken

    def begin(self, *args: Any) -> None:
        if self._thread is not None:
            raise RuntimeError("EarlyStart.begin called twice")

        def run() -> None:
            try:
                self._result = self.build(*args)
            except BaseException as err:  # handed to the test that takes it, where it fails that test
                self._error = err

        self._thread = threading.Thread(target=run, name="early-start", daemon=True)
        self._thread.start()

    def take(self, timeout_s: float = 600.0) -> Any:
        if not self.started:
            raise RuntimeError("nothing was started, or it was taken already")
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"the early start did not finish within {timeout_s:.0f} s")
        self._taken = True
        result, error, self._result, self._error = self._result, self._error, None, None
        if error is not None:
            raise error
        return result

    def discard(self, close: Callable[[Any], None]) -> None:
        """Close what was built but never taken (its tests deselected, or stopped with -x before them)."""
        if not self.started:
            return
        self._thread.join()
        self._taken = True
        if self._result is not None:
            close(self._result)
        self._result = self._error = None


EARLY_VLLM_ENGINE = pytest.StashKey[EarlyStart]()  # set at collection when the session runs the vLLM engine contract
