"""A run's temporary files in one directory of its own, gone when the run ends, however it ends.

Libraries put files in the system temp dir and remove them only at a clean exit of the process that made them:
wandb's media and artifact staging dirs (`tmp*wandb-media`, `tmp*wandb-artifacts`, and a `tmp*/val/` for each
logged table), multiprocessing's `pymp-*`, the torch FileStore that vLLM's engine rendezvouses through
(`vllm_dist_*`). A driver that is SIGKILLed, and Ray's actors, which all end by being killed, left them in /tmp:
a development machine held 18 of them after a day of suite runs and benches. So the CLI points TMPDIR of the
driver, and with it of every process the run starts (Ray's workers inherit the local cluster's environment, vLLM's
engine and the judge server theirs), at `rlvr-run-<driver pid>-*` under the system temp dir, which the driver's
guardian removes once the driver has ended: after its last exit handler when it exits, at once when it is killed.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
from collections.abc import Mapping

from rlvr.lifecycle.guardian import guard_path_after_exit

PREFIX = "rlvr-run-"


def use_run_tmpdir() -> str:
    """Makes this process's temp dir, and its future children's, a new directory removed when this process ends;
    returns its path."""
    base = tempfile.gettempdir()
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base)
    guard_path_after_exit(path)
    os.environ.update(tmpdir_env(path))
    tempfile.tempdir = None  # gettempdir() caches its first answer: the next call reads TMPDIR again
    return path


def tmpdir_env(path: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment that gives processes `path` as their temp dir while what must outlive it stays where it
    was: Ray's session directory (its logs, which Ray places under TMPDIR) and torch inductor's compile cache (in
    the temp dir too, reused by the next run). A value set in `env` (default: this process's environment) wins."""
    env = os.environ if env is None else env
    base = tempfile.gettempdir()
    return {"TMPDIR": path, "RAY_TMPDIR": env.get("RAY_TMPDIR", base),
            "TORCHINDUCTOR_CACHE_DIR": env.get("TORCHINDUCTOR_CACHE_DIR",
                                               os.path.join(base, f"torchinductor_{_user()}"))}


def _user() -> str:
    """The user name as torch inductor spells it in its default cache dir (torch/_inductor/runtime/
    cache_dir_utils.py), so that the cache a run uses is the one it used before."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = f"uid_{os.getuid()}"
    return re.sub(r'[\\/:*?"<>|]', "_", name)
