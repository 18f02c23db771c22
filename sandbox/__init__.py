"""The code-execution sandbox service (DESIGN.md, sandbox/): run untrusted Python / C / C++ and report what
happened. `BwrapBackend` isolates with bubblewrap + rlimits + seccomp, `DockerBackend` with a Docker engine;
`sandbox.server` serves either over HTTP on loopback and `sandbox.client` talks to it (or runs in-process)."""

from sandbox.types import LANGUAGES, RUN_STATUSES, Limits, RunRequest, RunResult

__all__ = ["LANGUAGES", "RUN_STATUSES", "Limits", "RunRequest", "RunResult"]
