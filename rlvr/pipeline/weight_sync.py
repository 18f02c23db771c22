"""actor_train -> actor_infer weight sync, driver side: the collective group (rlvr/backends/weight_sync.py) or,
as the fallback, Ray's object store (`actor_train.weight_sync`). The logprob parity check after it stays in the
pipeline's `model_update`.

Inference workers are restartable (docs/faults.md); the collective group is not: a group has fixed members, and
a restarted worker is a new process outside it. So the group is formed at the first sync and formed again, from
actor_train's rank 0, whenever the inference workers' processes changed since (their pids, asked before every
sync; one that is restarting is waited for). A restarted worker does not wait for the next sync to serve again:
the supervisor loads it through the object store (`restart_weights`) and the next sync takes it into a new group.
A sync that fails (a worker died during the broadcast: its peers' receives end at actor_train.
weight_sync_timeout_s) is counted and done again in a new group, up to faults.max_restarts times.
"""

from __future__ import annotations

import logging
import time

import ray
from ray.exceptions import RayActorError, RayTaskError

from rlvr.config.root import Config
from rlvr.runtime.waiter import Waiter
from rlvr.workers.clusters import ActorInferCluster, ActorTrainCluster

log = logging.getLogger(__name__)


def weight_sync_backend(sender: set[tuple[str, str]], receivers: list[set[tuple[str, str]]]) -> str:
    """NCCL when the sender and every receiver hold GPUs, and none of them the sender's (NCCL cannot put two ranks
    on one device: a colocated or fractional-GPU layout); gloo otherwise, through CPU memory. The sets hold the
    (node id, GPU id) pairs Ray gave each actor."""
    if sender and all(receivers) and not any(sender & r for r in receivers):
        return "nccl"
    return "gloo"


def _gpus_of(actor) -> ray.ObjectRef:
    return actor.__ray_call__.remote(
        lambda self: {(ray.get_runtime_context().get_node_id(), str(g)) for g in ray.get_gpu_ids()})


def infer_rank_offsets(n_workers: int, ranks_per_worker: int) -> list[int]:
    """First group rank of each inference worker; rank 0 is actor_train's rank 0."""
    return [1 + i * ranks_per_worker for i in range(n_workers)]


class WeightSync:
    def __init__(self, cfg: Config, actor_train: ActorTrainCluster, actor_infer: ActorInferCluster, waiter: Waiter):
        t = cfg.actor_train
        self.cfg, self.waiter = cfg, waiter
        self.method, self.actor_train, self.actor_infer = t.weight_sync, actor_train, actor_infer
        self.bucket_bytes = int(t.weight_sync_bucket_mb * (1 << 20))
        self.ranks_per_worker = cfg.generation.tensor_parallel_size if cfg.generation.engine == "vllm" else 1
        self.backend: str | None = None
        self.members: list[int] | None = None  # pids of the inference workers in the current group
        self.version: int | None = None  # of the last sync
        self.supervisor = None  # the pipeline's (rlvr/pipeline/faults.py): restarts and their events
        self.events = None

    def supervise(self, supervisor, events) -> None:
        """Restarted inference workers get weights from the supervisor (see `weight_source`)."""
        self.supervisor, self.events = supervisor, events

    @property
    def weight_source(self):
        """For the supervisor's restarted inference workers: with the collective group the object store holds no
        weights, so they come from actor_train when one comes back (`restart_weights`); None: the last sync's
        ref, which the supervisor keeps."""
        return self.restart_weights if self.method == "collective" else None

    # ------------------------------------------------------------------ one sync
    def push(self, version: int) -> dict[str, float]:
        """The trainer's weights into every inference worker, tagged `version`. Metrics: bytes and seconds."""
        start = time.perf_counter()
        if self.method == "collective":
            size = self._broadcast(version)
        else:
            self._through_object_store(version)
            size = None
        self.version = version
        seconds = time.perf_counter() - start
        out = {"weight_sync/seconds": seconds}
        if size is not None:
            out.update({"weight_sync/gb": size / 1e9, "weight_sync/gb_per_s": size / 1e9 / max(seconds, 1e-9)})
        return out

    def restart_weights(self) -> tuple[ray.ObjectRef, int] | None:
        """For a restarted inference worker: actor_train's weights through the object store (every rank takes
        part, rank 0's are used), tagged with the last synced version. A trainer busy with a step answers after
        it: the worker then serves one step ahead of its tag (its behaviour logprobs are its own, so the
        importance ratios stay exact) until the next sync."""
        if self.version is None:
            return None
        weights, *_ = self.actor_train.weights_for_sync_async()
        return weights, self.version

    def _through_object_store(self, version: int) -> None:
        # no driver copy: every rank takes part (ZeRO gathers), rank 0's is used
        weights, *others = self.actor_train.weights_for_sync_async()
        if self.supervisor is not None:  # re-sent to workers restarted meanwhile, kept for later restarts
            self.supervisor.push_weights(weights, version)
        else:
            self.waiter.get(self.actor_infer.load_weights_async(weights, version), "actor_infer.load_weights")
        self.waiter.get(others, "actor_train.weights_for_sync")

    def _broadcast(self, version: int) -> float:
        tries = self.cfg.faults.max_restarts + 1
        for attempt in range(tries):
            pids = self._pids()
            if pids != self.members:
                if self.members is not None:  # a restart's consequence, not a fault of its own: logged, not counted
                    log.info("weight sync: inference processes changed %s -> %s, a new group", self.members, pids)
                self._form(pids)
            try:
                sent, *_ = self.waiter.get(self.actor_train.broadcast_weights_async(version, self.bucket_bytes)
                                           + self.actor_infer.receive_weights_async(version), "weight sync")
                return sent["bytes"]
            except (RayActorError, RayTaskError) as err:
                if attempt == tries - 1:
                    raise
                log.warning("weight sync failed (%s): a new group, and again", str(err)[:200])
                self._record("sync_resent", error=str(err)[:200])
                self.members = None
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ the group
    def _pids(self) -> list[int]:
        """The inference workers' processes now; one restarting is waited for (faults.restart_timeout_s)."""
        return [h["pid"] for h in self.actor_infer.health(self.cfg.faults.resend_patience_s)]

    def _form(self, pids: list[int]) -> None:
        """A new group: actor_train's rank 0 hosts it (closing its old one), every inference process joins."""
        t, workers = self.cfg.actor_train, self.actor_infer.workers
        if self.backend is None:
            sender, *receivers = self.waiter.get([_gpus_of(self.actor_train.workers[0])]
                                                 + [_gpus_of(w) for w in workers], "weight sync: GPUs")
            self.backend = weight_sync_backend(sender, receivers)
            if self.backend == "gloo" and sender:
                log.warning("weight sync over gloo (through CPU memory): actor_infer shares actor_train rank 0's "
                            "GPU or has none of its own, and NCCL needs one device per rank")
        world = 1 + len(workers) * self.ranks_per_worker
        sender = self.actor_train.workers[0]
        address = self.waiter.get(sender.host_weight_group.remote(world, self.backend, t.weight_sync_timeout_s),
                                  "weight sync: host the group")
        self.waiter.get([sender.connect_weight_group.remote()] + [
            w.join_weight_group.remote(address, offset, world, self.backend, t.weight_sync_timeout_s)
            for w, offset in zip(workers, infer_rank_offsets(len(workers), self.ranks_per_worker))],
            "weight sync: form the group")
        self.members = pids

    def _record(self, event: str, **detail) -> None:
        if self.events is not None:
            self.events.record("actor_infer", event, **detail)


__all__ = ["WeightSync", "infer_rank_offsets", "weight_sync_backend"]
