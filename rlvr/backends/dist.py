"""Process-group helpers for data-parallel training workers: rendezvous address, backend by device, reductions.

One process group per training cluster: `world_size` processes (Ray actors or spawned processes) join it through
rank 0's address and a free port that rank 0 picked (`rendezvous_address`). The backend follows the device:
NCCL when the process sees a CUDA device, gloo otherwise; never assume CPU.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist


def device_type() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def import_deepspeed():
    """`import deepspeed`, telling it to use its CPU accelerator when this process sees no CUDA device (the worker
    sets this itself: nobody has to export DS_ACCELERATOR=cpu on a CPU host)."""
    if device_type() != "cuda":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    return deepspeed


def backend_for_device() -> str:
    return "nccl" if device_type() == "cuda" else "gloo"


def node_ip() -> str:
    """An address of this node that other nodes can reach (Ray's view when Ray is up, else the hostname's)."""
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except Exception:  # Ray missing or not in a Ray process: fall back to the socket view
        pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def free_port() -> int:
    """A TCP port that was free a moment ago (bind to 0). Rank 0 calls it; the small race is the usual one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def rendezvous_address() -> tuple[str, int]:
    """(address, port) for rank 0 to publish to every rank before they build their strategies."""
    return node_ip(), free_port()


def set_dist_env(rank: int, world_size: int, master_addr: str, master_port: int) -> int:
    """The environment variables DeepSpeed and torch.distributed read. Returns the local device index."""
    if device_type() == "cuda":
        # Ray gives each GPU actor its own CUDA_VISIBLE_DEVICES (one device: index 0); spawned processes on a
        # multi-GPU box see every device and take rank % count.
        local_rank = rank % max(torch.cuda.device_count(), 1)
    else:
        local_rank = 0
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(local_rank),
                      MASTER_ADDR=str(master_addr), MASTER_PORT=str(master_port))
    # LOCAL_SIZE is what switches DeepSpeed's CPU shared-memory all-reduce on; leave it unset (gloo does the
    # work), so ranks never share /dev/shm segments with unrelated jobs on the same machine.
    os.environ.pop("LOCAL_SIZE", None)
    return local_rank


def init_process_group(rank: int, world_size: int, master_addr: str, master_port: int, *,
                       use_deepspeed: bool = True, timeout_s: float = 1800.0) -> None:
    """Join (or create) the default process group; a no-op when this process already has one."""
    if dist.is_available() and dist.is_initialized():
        if dist.get_world_size() != world_size or dist.get_rank() != rank:
            raise RuntimeError(f"process group already initialised as rank {dist.get_rank()}/"
                               f"{dist.get_world_size()}, asked for {rank}/{world_size}")
        return
    local_rank = set_dist_env(rank, world_size, master_addr, master_port)
    if device_type() == "cuda":
        torch.cuda.set_device(local_rank)
    backend = backend_for_device()
    init_method = f"tcp://{master_addr}:{master_port}"
    if use_deepspeed:
        import_deepspeed().init_distributed(dist_backend=backend, auto_mpi_discovery=False,
                                            init_method=init_method, rank=rank, world_size=world_size,
                                            timeout=timedelta(seconds=timeout_s), verbose=False)
    else:
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout_s))


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def all_reduce_sum(values: dict[str, float], device: torch.device | str = "cpu") -> dict[str, float]:
    """Sum each value over the ranks (float64 on the wire); every rank gets the same dict back.
    Every rank must pass the same keys (sorted here so the order agrees)."""
    if world_size() == 1 or not values:
        return dict(values)
    keys = sorted(values)
    t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return dict(zip(keys, t.cpu().tolist()))


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


def destroy_process_group() -> None:
    """Leave the default process group, if this process is in one. A process that exits normally with a gloo
    group still up can die with SIGABRT ("terminate called without an active exception"): gloo's threads are
    torn down during interpreter exit, and under load that races (3 of 10 two-rank runs on a busy 2-core box).
    Every process that joins a group and exits normally calls this first."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


__all__ = ["all_reduce_sum", "backend_for_device", "barrier", "destroy_process_group", "device_type", "free_port",
           "import_deepspeed", "init_process_group", "node_ip", "rendezvous_address", "set_dist_env",
           "world_size"]
