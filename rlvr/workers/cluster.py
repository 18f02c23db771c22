"""A cluster: a named group of Ray actors of one worker class. Fan-out and gather, nothing hidden."""

from __future__ import annotations

from typing import Any

import ray


class Cluster:
    def __init__(self, name: str, worker_cls: type, world_size: int, *args: Any,
                 num_cpus: float = 0, num_gpus: float = 0, max_concurrency: int | None = None, **kwargs: Any):
        # num_cpus=0 by default: workers of different phases take turns on the same cores, and Ray must not
        # refuse to place them on a 2-core machine; the torch thread count is set inside each worker.
        options: dict[str, Any] = {"num_cpus": num_cpus, "num_gpus": num_gpus}
        if max_concurrency is not None:
            options["max_concurrency"] = max_concurrency
        remote_cls = ray.remote(worker_cls)
        self.name = name
        self.workers = [remote_cls.options(**options).remote(*args, rank=rank, **kwargs)
                        for rank in range(world_size)]

    def __len__(self) -> int:
        return len(self.workers)

    def call(self, method: str, *args: Any, **kwargs: Any) -> list[ray.ObjectRef]:
        """The same call on every worker; returns the refs (use `gather` to wait)."""
        return [getattr(w, method).remote(*args, **kwargs) for w in self.workers]

    def gather(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return ray.get(self.call(method, *args, **kwargs))

    def first(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return ray.get(getattr(self.workers[0], method).remote(*args, **kwargs))

    def kill(self) -> None:
        for w in self.workers:
            ray.kill(w, no_restart=True)
