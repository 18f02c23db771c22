"""Ranks that join a gloo process group exit cleanly when they leave it first.

Without `rlvr.backends.dist.destroy_process_group` before a normal exit, gloo's threads are torn down during
interpreter exit and a rank can die with SIGABRT ("terminate called without an active exception"): 3 of 10
two-rank runs on a loaded 2-core machine, which turned the DeepSpeed strategy tests red in full-suite runs.
"""

from __future__ import annotations

import pytest
import torch

REPEATS = 6


def _rank(rank: int, world_size: int, port: int) -> None:
    from rlvr.backends import dist as rdist

    rdist.init_process_group(rank, world_size, "127.0.0.1", port, use_deepspeed=False)
    try:
        t = torch.ones(4096)
        for _ in range(3):
            torch.distributed.all_reduce(t)
        assert float(t[0]) == world_size**3
    finally:
        rdist.destroy_process_group()
    assert not torch.distributed.is_initialized()


def test_two_ranks_leave_the_group_and_exit_cleanly():
    import torch.multiprocessing as mp

    from rlvr.backends.dist import free_port

    for attempt in range(REPEATS):
        ctx = mp.start_processes(_rank, args=(2, free_port()), nprocs=2, start_method="spawn", join=False)
        try:
            while not ctx.join(timeout=60):
                pass
        except mp.ProcessExitedException as err:  # SIGABRT at exit shows up here
            pytest.fail(f"attempt {attempt}: {err}")
