"""The collective weight-sync group (rlvr/backends/weight_sync.py) between real processes over gloo: exact tensors
in several buckets, two versions in a row, and a receiver that lacks a name drains the broadcast (so the sender
and the other receivers finish) before it fails."""

from __future__ import annotations

import multiprocessing as mp

import torch

from rlvr.backends.weight_sync import WeightGroup


def weights(version: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(version)
    return {"embed.weight": torch.randn(50, 8, generator=g), "layer.0.w": torch.randn(8, 8, generator=g),
            "layer.0.b": torch.randn(8, generator=g).to(torch.bfloat16), "norm": torch.randn(8, generator=g)}


def receiver(address, rank, world, expected, versions, out):
    try:
        group = WeightGroup.join(address, rank, world, "gloo", "127.0.0.1", 60)
        for version in versions:
            try:
                plan = group.plan_with(version, expected)  # drains and raises when a name is lacking
            except KeyError:
                out.put((rank, version, "missing", [n for n in expected if n not in weights(version)]))
                continue
            got = dict(group.receive(plan))
            ok = all(torch.equal(got[n], t) for n, t in weights(version).items()) and len(plan) > 1
            out.put((rank, version, "ok" if ok else "wrong", sorted(got)))
        group.close()
    except Exception as err:  # reported to the test instead of a silent hang
        out.put((rank, None, "error", repr(err)))


def test_broadcast_reaches_every_rank_exactly_and_a_lacking_rank_drains():
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    names = list(weights(0))
    sender = WeightGroup.host_group(3, "gloo", "127.0.0.1", 60)
    procs = [ctx.Process(target=receiver, args=(sender.address, 1, 3, names, [1, 2], out)),
             ctx.Process(target=receiver, args=(sender.address, 2, 3, names + ["lm_head.weight"], [1, 2], out))]
    for p in procs:
        p.start()
    try:
        sender.connect()
        stats = [sender.send(weights(v), v, bucket_bytes=1024) for v in (1, 2)]
        results = sorted(out.get(timeout=60) for _ in range(4))
        sender.close()
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [0, 0]  # a clean exit, the group left first
    assert [s["buckets"] for s in stats] == [2.0, 2.0]  # 1600 B of embedding alone; 256 + 16 + 32 B in 352 B
    assert results[0][:3] == (1, 1, "ok") and results[1][:3] == (1, 2, "ok")
    assert results[2] == (2, 1, "missing", ["lm_head.weight"]) and results[3][2] == "missing"
