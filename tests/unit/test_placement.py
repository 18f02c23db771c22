"""Placement arithmetic (rlvr/workers/placement.py), addresses of shared servers, and the config keys of scale-out."""

from __future__ import annotations

import pytest

from rlvr.config.base import ConfigError
from rlvr.config.load import config_from_dict
from rlvr.pipeline.local_servers import reachable_url
from rlvr.pipeline.weight_sync import infer_rank_offsets, weight_sync_backend
from rlvr.workers.placement import (WorkerRequest, add_bundles, colocated_bundles, critic_gpus_per_worker,
                                    gpu_shortfall, gpus_per_worker, missing_resources)


def cfg(**sections):
    tree = {"data": {"train_files": ["unused.jsonl"]},
            "domains": {"d": {"reward": {"worker": "rlvr.workers.rewards.math_rule.MathRuleRewardWorker"}}}}
    tree.update(sections)
    return config_from_dict(tree)


def test_every_cluster_s_gpus_must_fit_together():
    """Each cluster fits 2 GPUs alone; together actor_train, reference, critic and actor_infer need 4: an error
    naming each part, not actors that Ray leaves pending forever."""
    c = cfg(algorithm={"adv_estimator": "gae", "kl_loss_coef": 0.1})
    train, infer = gpus_per_worker(c, cluster_gpus=2)
    critic = critic_gpus_per_worker(c, cluster_gpus=2)
    assert (train, infer, critic) == (1.0, 1.0, 1.0)
    assert gpu_shortfall(c, train, infer, critic, have=2) == (
        "4 GPUs needed in all (actor_train 1 + reference 1 + critic 1 + actor_infer 1); the Ray cluster has {GPU: 2}")
    assert gpu_shortfall(c, train, infer, critic, have=4) is None
    # colocated with actor_train, reference and actor_infer use its bundles' GPUs: one GPU split three ways
    c = cfg(placement={"actor_infer": {"colocate_with": "actor_train"}, "reference": {"colocate_with": "actor_train"}},
            algorithm={"kl_loss_coef": 0.1})
    train, infer = gpus_per_worker(c, cluster_gpus=1)
    assert gpu_shortfall(c, train, infer, critic_gpus_per_worker(c, 1), have=1) is None
    assert critic_gpus_per_worker(cfg(critic={"num_gpus_per_worker": 0.5}), cluster_gpus=0) == 0.5


def test_bundle_leaves_out_zero_amounts():
    assert WorkerRequest(0.0, 0.0, {"trainer": 1}).bundle() == {"trainer": 1.0}
    assert WorkerRequest(2, 0.5, {}).bundle() == {"CPU": 2.0, "GPU": 0.5}
    assert WorkerRequest().bundle() == {}


def test_colocated_members_grow_the_owner_bundles_round_robin():
    owner = [WorkerRequest(1, 0.5)] * 2
    infer = [WorkerRequest(0, 0.25)] * 3  # worker 2 wraps around to bundle 0
    reference = [WorkerRequest(0, 0.25)]
    bundles = colocated_bundles(owner, [infer, reference])
    # bundle 0: train 0.5 + infer 0 and 2 (0.25 each) + reference 0.25; bundle 1: train 0.5 + infer 1
    assert bundles == [{"CPU": 1.0, "GPU": 1.25}, {"CPU": 1.0, "GPU": 0.75}]


def test_add_and_missing_resources():
    assert add_bundles({"CPU": 1, "x": 2}, {"x": 1, "GPU": 1}) == {"CPU": 1, "x": 3, "GPU": 1}
    assert missing_resources({"GPU": 2, "x": 1}, {"GPU": 2.0}) == {"x": 1}
    assert missing_resources({"GPU": 3}, {"GPU": 2.0}) == {"GPU": 3}
    assert missing_resources({"CPU": 1}, {"CPU": 1.0}) == {}


def test_gpus_default_to_one_per_rank_and_tp_per_inference_worker():
    c = cfg(generation={"engine": "vllm", "tensor_parallel_size": 4})
    assert gpus_per_worker(c, cluster_gpus=16) == (1.0, 4.0)
    assert gpus_per_worker(c, cluster_gpus=0) == (0.0, 0.0)
    c = cfg(actor_train={"num_gpus_per_worker": 0.5}, generation={"num_gpus_per_worker": 0.25})
    assert gpus_per_worker(c, cluster_gpus=1) == (0.5, 0.25)
    c = cfg(placement={"actor_infer": {"colocate_with": "actor_train"}, "reference": {"colocate_with": "actor_train"}},
            algorithm={"kl_loss_coef": 0.1})
    assert gpus_per_worker(c, cluster_gpus=8) == (pytest.approx(1 / 3), pytest.approx(1 / 3))  # one GPU, 3 ways


def test_weight_sync_backend_and_ranks():
    a0, a1, b0 = ("nodeA", "0"), ("nodeA", "1"), ("nodeB", "0")
    assert weight_sync_backend({a0}, [{a1}, {b0}]) == "nccl"  # GPUs everywhere, one device per rank
    assert weight_sync_backend({a0}, [{a0}, {b0}]) == "gloo"  # a receiver shares the sender's GPU (colocated)
    assert weight_sync_backend({a0}, [{a1}, set()]) == "gloo"  # a receiver on CPU
    assert weight_sync_backend(set(), [set()]) == "gloo"
    assert infer_rank_offsets(3, 2) == [1, 3, 5]  # rank 0 is the trainer; 2 tensor-parallel ranks per worker


@pytest.mark.parametrize("bind, url, expected", [
    ("127.0.0.1", "http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    ("0.0.0.0", "http://0.0.0.0:8000/v1", "http://10.1.2.3:8000/v1"),
    ("::", "http://[::]:9/x", "http://10.1.2.3:9/x"),
    ("10.9.9.9", "http://10.9.9.9:1", "http://10.9.9.9:1"),
])
def test_wildcard_bind_is_advertised_as_the_node_address(bind, url, expected):
    assert reachable_url(url, bind, node_address="10.1.2.3") == expected


def test_placement_keys_validate():
    c = cfg(placement={"actor_infer": {"strategy": "SPREAD", "resources": {"infer_node": 1}},
                       "reward": {"strategy": "PACK", "num_cpus_per_worker": 1}})
    assert c.placement.actor_infer.strategy == "SPREAD" and c.placement.reward.num_cpus_per_worker == 1
    with pytest.raises(ConfigError, match="placement.reward.colocate_with"):
        cfg(placement={"reward": {"colocate_with": "actor_train"}})
    with pytest.raises(ConfigError, match="placement.actor_train.resources.*set num_cpus_per_worker"):
        cfg(placement={"actor_train": {"resources": {"CPU": 1}}})
    with pytest.raises(ConfigError, match="placement.actor_infer.strategy"):
        cfg(placement={"actor_infer": {"strategy": "pack"}})
    with pytest.raises(ConfigError, match="resource 'x' must be > 0"):
        cfg(placement={"scheduler": {"resources": {"x": 0}}})


def test_tensor_parallel_needs_vllm_and_no_colocation():
    with pytest.raises(ConfigError, match="generation.tensor_parallel_size: 2 needs engine: vllm"):
        cfg(generation={"tensor_parallel_size": 2})
    with pytest.raises(ConfigError, match="placement.actor_infer.colocate_with"):
        cfg(generation={"engine": "vllm", "tensor_parallel_size": 2},
            placement={"actor_infer": {"colocate_with": "actor_train"}})


def test_weight_sync_switch():
    assert cfg().actor_train.weight_sync == "collective"
    assert cfg(actor_train={"weight_sync": "object_store"}).actor_train.weight_sync == "object_store"
    with pytest.raises(ConfigError, match="actor_train.weight_sync"):
        cfg(actor_train={"weight_sync": "nfs"})
