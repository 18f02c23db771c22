"""Weight sync over a collective group: actor_train rank 0 broadcasts the policy, in buckets, to every process that
holds an inference model (an HF engine's actor, each tensor-parallel worker process of a vLLM engine).

The group is one of its own: a TCPStore hosted by rank 0 plus a gloo (CPU) or NCCL (GPU) process group built on
it directly, beside whatever default group the process already has (DeepSpeed's ranks, vLLM's tensor-parallel
group), so neither is disturbed. Ranks: 0 is the sender; inference worker i with tensor parallelism t holds ranks
1 + i*t ... 1 + i*t + t-1 (OpenRLHF's `rank_offset` layout for vLLM workers, also Trinity-RFT's).

Per sync: the sender publishes the bucket plan (names, shapes, dtypes, byte offsets) in the store under the
version, then broadcasts one contiguous byte buffer per bucket; receivers read the plan, check the names they need,
and receive each bucket into a fresh buffer whose views they hand to the model loader. The next bucket's
broadcast is posted before the current one is handed over, so packing / loading overlap the transfer.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

ALIGN = 64  # byte alignment of each tensor in a bucket: every dtype's view of its slice is aligned


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # torch dtype name without the prefix, e.g. "float32"
    offset: int  # bytes from the start of the bucket
    nbytes: int


@dataclass(frozen=True)
class Bucket:
    specs: tuple[TensorSpec, ...]
    nbytes: int


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def plan_buckets(tensors: list[tuple[str, tuple[int, ...], torch.dtype]], bucket_bytes: int) -> list[Bucket]:
    """Tensors in their given order, packed into buckets of at most `bucket_bytes` (a larger tensor gets a bucket
    of its own), each tensor at an ALIGN-aligned offset."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes}")
    buckets: list[Bucket] = []
    specs: list[TensorSpec] = []
    used = 0
    for name, shape, dtype in tensors:
        nbytes = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
        offset = _align(used)
        if specs and offset + nbytes > bucket_bytes:
            buckets.append(Bucket(tuple(specs), used))
            specs, offset = [], 0
        specs.append(TensorSpec(name, tuple(shape), str(dtype).removeprefix("torch."), offset, nbytes))
        used = offset + nbytes
    if specs:
        buckets.append(Bucket(tuple(specs), used))
    return buckets


def pack(bucket: Bucket, tensors: dict[str, torch.Tensor], device: torch.device | str) -> torch.Tensor:
    """The bucket's tensors as one byte buffer on `device`."""
    buf = torch.empty(bucket.nbytes, dtype=torch.uint8, device=device)
    for spec in bucket.specs:
        view(buf, spec).copy_(tensors[spec.name])
    return buf


def view(buf: torch.Tensor, spec: TensorSpec) -> torch.Tensor:
    """The tensor `spec` names, as a view of the bucket's byte buffer."""
    return buf[spec.offset: spec.offset + spec.nbytes].view(getattr(torch, spec.dtype)).view(spec.shape)


def unpack(bucket: Bucket, buf: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
    for spec in bucket.specs:
        yield spec.name, view(buf, spec)


def group_device(backend: str) -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")


def _process_group(store: dist.Store, rank: int, world_size: int, backend: str, host: str, timeout: timedelta):
    if backend == "gloo":
        options = dist.ProcessGroupGloo._Options()
        options._timeout = timeout
        # The node's reachable address, not whatever the hostname resolves to (often loopback on cluster nodes).
        options._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
        return dist.ProcessGroupGloo(store, rank, world_size, options)
    if backend == "nccl":
        if not dist.is_nccl_available():
            raise RuntimeError("weight sync over NCCL: this torch build has no NCCL (a CPU build?)")
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, world_size, options)
    raise ValueError(f"weight sync backend must be gloo or nccl, got {backend!r}")


class WeightGroup:
    """One member of a weight-sync group. Rank 0 calls `host(...)` (returns at once; publish `address`), then
    `connect()`; the others `WeightGroup.join(...)`. connect / join block until every rank has come."""

    def __init__(self, store: dist.Store, rank: int, world_size: int, backend: str, host: str, timeout_s: float):
        self.store, self.rank, self.world_size, self.backend = store, rank, world_size, backend
        self.host, self.timeout = host, timedelta(seconds=timeout_s)
        self.pg = None
        self._last_version: int | None = None

    @classmethod
    def host_group(cls, world_size: int, backend: str, host: str, timeout_s: float) -> "WeightGroup":
        store = dist.TCPStore(host, 0, world_size, True, timedelta(seconds=timeout_s), wait_for_workers=False)
        return cls(store, 0, world_size, backend, host, timeout_s)

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.store.port

    def connect(self) -> "WeightGroup":
        self.pg = _process_group(self.store, self.rank, self.world_size, self.backend, self.host, self.timeout)
        return self

    @classmethod
    def join(cls, address: tuple[str, int], rank: int, world_size: int, backend: str, host: str,
             timeout_s: float) -> "WeightGroup":
        """`host`: this process's own reachable address (gloo binds it)."""
        store = dist.TCPStore(address[0], address[1], world_size, False, timedelta(seconds=timeout_s))
        return cls(store, rank, world_size, backend, host, timeout_s).connect()

    # ------------------------------------------------------------------ sender (rank 0)
    def send(self, tensors: dict[str, torch.Tensor], version: int, bucket_bytes: int) -> dict[str, float]:
        """Broadcasts `tensors` to every other rank. Returns {bytes, buckets, seconds}."""
        start = time.perf_counter()
        plan = plan_buckets([(n, tuple(t.shape), t.dtype) for n, t in tensors.items()], bucket_bytes)
        self.store.set(f"plan/{version}", pickle.dumps(plan))
        if self._last_version is not None and self._last_version != version:
            self.store.delete_key(f"plan/{self._last_version}")  # every rank read it before the last bucket
        self._last_version = version
        device = group_device(self.backend)
        pending = None
        for bucket in plan:
            buf = pack(bucket, tensors, device)  # packed while the previous bucket is on the wire
            work = self.pg.broadcast([buf], _root0())
            if pending is not None:
                pending[0].wait()
            pending = (work, buf)
        if pending is not None:
            pending[0].wait()
        _synchronize(device)  # NCCL: wait() only orders the streams; the buffers must outlive the transfer
        return {"bytes": float(sum(b.nbytes for b in plan)), "buckets": float(len(plan)),
                "seconds": time.perf_counter() - start}

    # ------------------------------------------------------------------ receivers
    def plan(self, version: int) -> list[Bucket]:
        """The sender's plan for `version` (waits for it, up to the group's timeout)."""
        return pickle.loads(self.store.get(f"plan/{version}"))

    def receive(self, plan: list[Bucket]) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, tensor) of every bucket, in order; each bucket lands in a buffer of its own, so a loader may keep
        the tensors. Must be consumed to the end (the sender waits for every bucket)."""
        device = group_device(self.backend)

        def post(bucket: Bucket):
            buf = torch.empty(bucket.nbytes, dtype=torch.uint8, device=device)
            return self.pg.broadcast([buf], _root0()), buf

        nxt = post(plan[0]) if plan else None
        for i, bucket in enumerate(plan):
            work, buf = nxt
            work.wait()
            nxt = post(plan[i + 1]) if i + 1 < len(plan) else None
            yield from unpack(bucket, buf)
        _synchronize(device)

    def close(self) -> None:
        """Leaves the group (a process exiting with a gloo group still up can abort in gloo's thread teardown)."""
        pg, self.pg = self.pg, None
        if pg is not None:
            pg.shutdown()

    def drain(self, plan: list[Bucket]) -> None:
        """Receives and drops a sync this rank cannot use, so that the sender and the other ranks finish it."""
        for _ in self.receive(plan):
            pass

    def plan_with(self, version: int, expected: list[str]) -> list[Bucket]:
        """The plan for `version`, once it holds every name the receiver needs; otherwise the sync is drained (the
        sender and the other ranks finish it) and KeyError names what is missing, before anything is loaded."""
        plan = self.plan(version)
        missing = check_names(plan, expected)
        if missing:
            self.drain(plan)
            raise KeyError(f"weight sync is missing {len(missing)} parameters, e.g. {missing[:3]}")
        return plan


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _root0() -> dist.BroadcastOptions:
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    opts.rootTensor = 0
    return opts


def check_names(plan: list[Bucket], expected: list[str]) -> list[str]:
    """Names the receiver needs that the plan lacks."""
    have = {spec.name for bucket in plan for spec in bucket.specs}
    return [name for name in expected if name not in have]


__all__ = ["Bucket", "TensorSpec", "WeightGroup", "check_names", "pack", "plan_buckets", "unpack", "view"]
