"""Servers the driver starts for the reward workers (the embedded judge server lives in build.py; the shared
sandbox server here), and the addresses they are reached at.

A server binds `host` (`judge_server.host`, `sandbox_server.host`): loopback by default, enough when every reward
worker runs on the driver's node. Bound to a wildcard address ("0.0.0.0", "::") it is reachable from other
nodes, and the URL handed to the reward workers carries this node's address (Ray's view of it), never the
wildcard. Neither server has authentication: bind them to private networks only.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit, urlunsplit

from rlvr.config.domains import RewardConfig
from rlvr.config.root import Config
from rlvr.workers.rewards.reward_actor import resolve_reward_class

log = logging.getLogger(__name__)

WILDCARDS = ("0.0.0.0", "::", "")


def reachable_url(url: str, bind_host: str, node_address: str | None = None) -> str:
    """`url` as other nodes should use it: a wildcard bind address replaced by this node's address."""
    if bind_host not in WILDCARDS:
        return url
    if node_address is None:
        from rlvr.backends.dist import node_ip

        node_address = node_ip()
    parts = urlsplit(url)
    host = f"[{node_address}]" if ":" in node_address else node_address
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


class SharedSandbox:
    """The one sandbox server the driver starts for code rewards with `sandbox: http, url: local`. Its own watcher
    thread starts it again when it dies (faults.max_restarts times, the same port when still free); a restart on
    another port is passed to the reward actors that use it (`users`, set once they exist). The supervisor
    counts the restarts (rlvr/pipeline/faults.py)."""

    def __init__(self, cfg: Config):
        from sandbox.client import LocalSandboxServer

        s = cfg.sandbox_server
        self.host = s.host
        self.users: list = []  # tell_on_restart
        self.server = LocalSandboxServer(max_parallel=s.max_parallel, host=s.host,
                                         startup_timeout_s=s.startup_timeout_s, backend=s.backend,
                                         max_restarts=cfg.faults.max_restarts, on_restart=self._moved)
        self.url = reachable_url(self.server.start(), s.host)

    def tell_on_restart(self, actors: list) -> None:
        """The reward actors that call this server: a restart on another port is passed to them."""
        self.users = list(actors)

    def _moved(self, url: str) -> None:  # on the server's watcher thread
        self.url = reachable_url(url, self.host)
        log.warning("shared sandbox server restarted at %s", self.url)
        for actor in self.users:  # not waited for: a dead reward actor gets the config URL, fixed at its restart
            actor.set_sandbox_url.remote(self.url)

    @property
    def restarts(self) -> int:
        return self.server.restarts

    def stop(self) -> None:
        self.server.stop()


def start_local_sandbox(cfg: Config, rewards: dict[str, RewardConfig]
                        ) -> tuple[SharedSandbox | None, dict[str, RewardConfig]]:
    """One sandbox server for every code reward with `sandbox: http, url: local`; returns it (None when none
    asked) and the reward configs with its URL filled in."""
    from rlvr.workers.rewards.code_sandbox import CodeSandboxRewardWorker

    local = [d for d, r in rewards.items() if issubclass(resolve_reward_class(d, r), CodeSandboxRewardWorker)
             and r.args.get("url") == "local"]
    if not local:
        return None, rewards
    shared = SharedSandbox(cfg)
    log.info("shared sandbox server for %s at %s", local, shared.url)
    rewards = dict(rewards)
    for d in local:
        rewards[d] = rewards[d].model_copy(update={"args": {**rewards[d].args, "url": shared.url}})
    return shared, rewards


__all__ = ["SharedSandbox", "reachable_url", "start_local_sandbox"]
