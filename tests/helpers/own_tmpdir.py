"""A temp dir of a test's own for the processes it starts and then kills on purpose (a SIGKILLed driver, a Ray
cluster shut down under its workers): what they leave in their temp dir (wandb's staging dirs, multiprocessing's
pymp-*) goes with the test instead of piling up in /tmp. Short, under the system temp dir: a Unix socket path
made inside it (multiprocessing's forkserver) must stay under 108 bytes, which a pytest tmp_path can exceed."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from rlvr.lifecycle.run_tmpdir import tmpdir_env


@contextlib.contextmanager
def own_tmpdir() -> Iterator[tuple[Path, dict[str, str]]]:
    """(the directory, the environment that makes it a child's temp dir); removed on exit."""
    path = tempfile.mkdtemp(prefix=f"rlvr-test-tmp-{os.getpid()}-")
    try:
        yield Path(path), tmpdir_env(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)
