"""Data-parallel ranks as real processes (torch.multiprocessing, spawn) for the DeepSpeed strategy tests, and the
comparisons of their results (relative L2 distance of parameter / gradient dicts, largest entry difference)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest
import torch


def _rank_then_leave(rank: int, log_dir: str, fn: Callable, *args) -> None:
    """A rank that exits with its gloo group up can abort in gloo's thread teardown (SIGABRT, "terminate called
    without an active exception"; tests/integration/test_dist_exit.py): every rank leaves the group first. A rank
    that finished its work then skips the interpreter's teardown (os._exit), where C++ destructors of whatever
    DeepSpeed and gloo still hold would run beside their threads: CI (stop 18) saw a two-rank DeepSpeed run's rank 0
    abort once even with the group left, with no stack kept, so where is not known; faulthandler now prints every
    thread's Python stack if a rank aborts anywhere. The rank's output goes to `log_dir`/rank<r>.log, whose tail
    spawn_ranks puts into the failure message."""
    import faulthandler
    import sys

    from rlvr.backends import dist as rdist

    log = os.open(os.path.join(log_dir, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    for fd in (1, 2):
        os.dup2(log, fd)
    faulthandler.enable(all_threads=True)
    try:
        fn(rank, *args)
        rdist.barrier()  # no rank tears down while a peer still finishes its last collective
    finally:
        rdist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    # multiprocessing's exit handlers, which os._exit skips: they unlink the named semaphores this rank created
    # (tqdm's write lock, made by transformers' "Loading weights" bar). Left to the pytest process's resource
    # tracker instead, a few of them outlived full suites in /dev/shm.
    from multiprocessing import util
    util._run_finalizers(0)
    os._exit(0)  # results are on disk (the ranks write files); an exception above still reaches spawn's handler


def spawn_ranks(fn: Callable, world_size: int, args: tuple, timeout_s: float = 900) -> None:
    """Runs fn(rank, world_size, port, *args) in `world_size` spawned processes joined through a free port; fails
    the test (and kills them) when a rank dies or past the timeout, with the tail of every rank's output in the
    message (a CI log keeps little more than that). Results travel through files the ranks write."""
    import tempfile

    import torch.multiprocessing as mp

    from rlvr.backends.dist import free_port

    if not torch.cuda.is_available():
        os.environ["DS_ACCELERATOR"] = "cpu"  # inherited by the spawned processes
    with tempfile.TemporaryDirectory(prefix="ranks-") as log_dir:
        ctx = mp.start_processes(_rank_then_leave, args=(log_dir, fn, world_size, free_port(), *args),
                                 nprocs=world_size, start_method="spawn", join=False)
        deadline = time.time() + timeout_s
        try:
            while not ctx.join(timeout=5):
                if time.time() > deadline:
                    for p in ctx.processes:
                        p.kill()
                    pytest.fail(f"world_size {world_size}: ranks did not finish in {timeout_s}s"
                                f"{_output_tails(log_dir, world_size)}", pytrace=False)
        except (mp.ProcessExitedException, mp.ProcessRaisedException) as err:
            pytest.fail(f"world_size {world_size}: {err}{_output_tails(log_dir, world_size)}", pytrace=False)


def _output_tails(log_dir: str, world_size: int, lines: int = 60) -> str:
    parts = []
    for rank in range(world_size):
        path = os.path.join(log_dir, f"rank{rank}.log")
        text = open(path, errors="replace").read() if os.path.exists(path) else "(no output)"
        parts.append(f"\n--- rank {rank}, last {lines} lines of its output ---\n"
                     + "\n".join(text.splitlines()[-lines:]))
    return "".join(parts)


def _flat(d: dict[str, torch.Tensor], keys) -> torch.Tensor:
    return torch.cat([d[k].float().flatten() for k in keys])


def rel(a: dict, b: dict) -> float:
    """|a - b| / |b| over all the tensors of b's keys (L2)."""
    keys = sorted(b)
    x, y = _flat(a, keys), _flat(b, keys)
    return float((x - y).norm() / y.norm())


def max_abs(a: dict, b: dict) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in b)


def update(result: dict) -> dict:
    """The parameter change of a step: result["after"] - result["before"]."""
    return {k: result["after"][k] - result["before"][k] for k in result["after"]}


def torch_step_capturing_grads(strategy, train: Callable[[], dict]) -> tuple[dict[str, torch.Tensor], dict]:
    """Runs train() on a TorchStrategy and returns (the gradients before clipping of its last optimizer step,
    train()'s metrics)."""
    grads: dict[str, torch.Tensor] = {}
    clip = torch.nn.utils.clip_grad_norm_

    def clip_capturing_grads(params, *args, **kwargs):
        grads.update({k: p.grad.detach().clone() for k, p in strategy.model.named_parameters()
                      if p.grad is not None})  # frozen LoRA base weights have none
        return clip(params, *args, **kwargs)

    torch.nn.utils.clip_grad_norm_ = clip_capturing_grads
    try:
        metrics = train()
    finally:
        torch.nn.utils.clip_grad_norm_ = clip
    return grads, metrics


def deepspeed_step_capturing_grads(strategy, train: Callable[[], dict]) -> tuple[dict[str, torch.Tensor], dict]:
    """Runs train() on a DeepSpeedStrategy and returns (the full gradients of its last optimizer step, gathered
    from the ZeRO partitions on every rank, train()'s metrics). Collective."""
    from deepspeed.utils import safe_get_full_grad

    grads: dict[str, torch.Tensor] = {}
    engine_step = strategy.engine.step

    def step_capturing_grads(*args, **kwargs):
        for name, p in strategy.module.named_parameters():  # collective: every rank, same order
            if not p.requires_grad:  # a frozen LoRA base weight
                continue
            grads[name] = safe_get_full_grad(p).detach().float().cpu().clone()
        return engine_step(*args, **kwargs)

    strategy.engine.step = step_capturing_grads
    try:
        metrics = train()
    finally:
        strategy.engine.step = engine_step
    return grads, metrics


def save_step_load_step(strategy, ckpt: str, train: Callable[[], dict]) -> dict:
    """Save, train a step, load, train the same step again (collective): what a round trip must reproduce. Returns
    the metrics and fp32 parameters after each part, and the exported model directory."""
    params = lambda: strategy.named_parameters_for_sync(torch.float32)  # noqa: E731
    strategy.save(ckpt)
    out = {"second_step": train(), "after_second": params()}
    strategy.load(ckpt)
    out["after_load"] = params()
    exported = f"{ckpt}/adapter" if strategy.lora is not None else f"{ckpt}/model"
    out.update(second_step_again=train(), after_second_again=params(), exported=exported)
    return out
