"""Bucket plans of the collective weight sync: hand-computed offsets and sizes, and exact round trips."""

from __future__ import annotations

import pytest
import torch

from rlvr.backends.weight_sync import ALIGN, check_names, pack, plan_buckets, unpack


def test_plan_packs_in_order_with_aligned_offsets():
    assert ALIGN == 64
    plan = plan_buckets([("a", (3,), torch.float32),      # 12 bytes at 0
                         ("b", (2, 5), torch.bfloat16),   # 20 bytes at 64
                         ("c", (40,), torch.float32)],    # 160 bytes: 128 + 160 > 200 -> a new bucket
                        bucket_bytes=200)
    assert [[(s.name, s.offset, s.nbytes) for s in b.specs] for b in plan] == [[("a", 0, 12), ("b", 64, 20)],
                                                                             [("c", 0, 160)]]
    assert [b.nbytes for b in plan] == [84, 160]
    assert plan[0].specs[1].dtype == "bfloat16" and plan[0].specs[1].shape == (2, 5)


def test_a_tensor_larger_than_a_bucket_gets_its_own():
    plan = plan_buckets([("small", (1,), torch.float32), ("big", (100,), torch.float32),
                         ("tail", (1,), torch.float32)], bucket_bytes=64)
    assert [[s.name for s in b.specs] for b in plan] == [["small"], ["big"], ["tail"]]
    assert plan[1].nbytes == 400
    with pytest.raises(ValueError, match="bucket_bytes"):
        plan_buckets([], 0)
    assert plan_buckets([], 10) == []


def test_pack_unpack_round_trip_is_exact():
    g = torch.Generator().manual_seed(0)
    tensors = {"w": torch.randn(7, 3, generator=g), "b": torch.randn(5, generator=g).to(torch.bfloat16),
               "s": torch.tensor(3.5)}
    plan = plan_buckets([(n, tuple(t.shape), t.dtype) for n, t in tensors.items()], bucket_bytes=128)
    out = {}
    for bucket in plan:
        out.update(unpack(bucket, pack(bucket, tensors, "cpu").clone()))
    assert out.keys() == tensors.keys()
    for name, t in tensors.items():
        assert out[name].dtype == t.dtype and out[name].shape == t.shape and torch.equal(out[name], t)


def test_check_names_lists_what_the_receiver_lacks():
    plan = plan_buckets([("a", (1,), torch.float32), ("b", (1,), torch.float32)], 1024)
    assert check_names(plan, ["a", "b"]) == [] and check_names(plan, ["a", "lm_head.weight"]) == ["lm_head.weight"]
