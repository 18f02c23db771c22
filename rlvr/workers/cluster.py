"""A cluster: a named group of Ray actors of one worker class. Fan-out and gather, nothing hidden."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

import ray

from rlvr.runtime.waiter import Waiter

if TYPE_CHECKING:
    from rlvr.workers.placement import Placement


class Cluster:
    """`workers`: handles with `.method.remote(...)` (Ray actors, or the simulator's local actors); every wait of
    `gather` and friends goes through `waiter` (a deadline, and supervision while waiting), and so through the
    waiter's runtime (Ray, or the simulator's virtual time: rlvr/sim). `start` makes the Ray actors. The typed
    clusters of rlvr/workers/clusters.py name the methods the driver calls; these generic ones take the name."""

    def __init__(self, name: str, workers: list, waiter: Waiter | None = None, placement: Placement | None = None):
        self.name = name
        self.workers = list(workers)
        self.waiter = waiter or Waiter()
        self.placement = placement
        self.unjoined = False  # a process group's workers not yet met (start(..., defer_join=True))

    @classmethod
    def start(cls, name: str, worker_cls: type, world_size: int, *args: Any,
              num_cpus: float = 0, num_gpus: float = 0, max_concurrency: int | None = None,
              rendezvous: bool = False, defer_join: bool = False, max_restarts: int = 0,
              waiter: Waiter | None = None, placement: Placement | None = None, **kwargs: Any) -> Self:
        """`world_size` Ray actors of `worker_cls`, each made with (*args, rank=r, **kwargs).

        rendezvous=True: the workers form one process group. Each gets `rank` and `world_size`; rank 0 picks
        an address and a free port on its own node (`rendezvous_address()`), and every rank joins through it in
        `setup(master_addr, master_port)`, called on all ranks at once (joining blocks until all have come).
        That waits for their constructors; `defer_join=True` returns at once and leaves it to `join()`, so that
        several clusters' workers load their models and engines at the same time.
        max_restarts: Ray restarts a worker that dies this many times (its constructor runs again); calls in
        flight at its death fail, later ones wait for it. `placement` (rlvr/workers/placement.py) gives each
        rank its Ray resources and placement-group bundle; it replaces num_cpus / num_gpus, and the cluster
        releases the placement group it owns in `kill`."""
        # num_cpus=0 by default: workers of different phases take turns on the same cores, and Ray must not
        # refuse to place them on a 2-core machine; the torch thread count is set inside each worker.
        options: dict[str, Any] = {"num_cpus": num_cpus, "num_gpus": num_gpus, "max_restarts": max_restarts}
        if max_concurrency is not None:
            options["max_concurrency"] = max_concurrency
        remote_cls = ray.remote(worker_cls)
        if rendezvous:
            kwargs = {**kwargs, "world_size": world_size}
        workers = [remote_cls.options(**{**options, **(placement.for_rank(rank) if placement else {})})
                   .remote(*args, rank=rank, **kwargs) for rank in range(world_size)]
        cluster = cls(name, workers, waiter, placement)
        cluster.unjoined = rendezvous
        if not defer_join:
            cluster.join()
        return cluster

    def join(self) -> None:
        """The process group's rendezvous (see `start`); nothing for a cluster without one or already joined.
        Clusters join one after another: rank 0 picks a free port, which its group holds once set up."""
        if not self.unjoined:
            return
        master_addr, master_port = self.waiter.get(self.workers[0].rendezvous_address.remote(),
                                                   f"{self.name}: rendezvous address")
        self.waiter.get([w.setup.remote(master_addr, master_port) for w in self.workers], f"{self.name}: setup")
        self.unjoined = False

    def __len__(self) -> int:
        return len(self.workers)

    def call(self, method: str, *args: Any, **kwargs: Any) -> list[ray.ObjectRef]:
        """The same call on every worker; returns the refs (use `gather` to wait)."""
        return [getattr(w, method).remote(*args, **kwargs) for w in self.workers]

    def gather(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return self.waiter.get(self.call(method, *args, **kwargs), f"{self.name}.{method}")

    def first(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self.waiter.get(getattr(self.workers[0], method).remote(*args, **kwargs), f"{self.name}.{method}")

    def collective(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The same call on every worker, which take part together in the collectives inside it (ZeRO
        gathers and reductions); returns rank 0's result."""
        return self.collected(self.collective_async(method, *args, **kwargs), method)

    def collected(self, refs: list[ray.ObjectRef], method: str) -> Any:
        """Rank 0's result of a `collective_async` call, waited for with the cluster's waiter (a deadline,
        supervision while waiting; every rank's error surfaces)."""
        return self.waiter.get(refs, f"{self.name}.{method}")[0]

    def collective_async(self, method: str, *args: Any, **kwargs: Any) -> list[ray.ObjectRef]:
        """`collective` without waiting: the refs of every rank's result (rank 0's first), so that several
        clusters can work at once. A large argument goes to the object store once, not once per worker (an
        ObjectRef argument is passed as it is)."""
        if len(self.workers) > 1:
            rt = self.waiter.runtime
            args = tuple(a if isinstance(a, (str, int, float, bool, type(None))) or rt.is_ref(a) else rt.put(a)
                         for a in args)
        return self.call(method, *args, **kwargs)

    def kill(self) -> None:
        for w in self.workers:
            ray.kill(w, no_restart=True)
        if self.placement is not None:
            self.placement.release()
