"""Planner against a live (local, one-node) Ray cluster: placement groups sized and shared as configured, and every
way a placement cannot be met is a ConfigError naming the key, never a hang."""

from __future__ import annotations

import pytest
from ray.util.placement_group import placement_group_table

from rlvr.config.base import ConfigError
from rlvr.config.load import config_from_dict
from rlvr.workers.placement import Planner


def cfg(**sections):
    tree = {"data": {"train_files": ["unused.jsonl"]},
            "domains": {"d": {"reward": {"worker": "rlvr.workers.rewards.math_rule.MathRuleRewardWorker"}}},
            "ray": {"placement_timeout_s": 2}}
    tree.update(sections)
    return config_from_dict(tree)


def test_colocated_inference_shares_actor_train_bundles(ray_local):
    planner = Planner(cfg(placement={"actor_train": {"num_cpus_per_worker": 0.25},
                                     "actor_infer": {"colocate_with": "actor_train", "num_cpus_per_worker": 0.25}},
                          generation={"world_size": 2}))
    try:
        train, infer = planner.actor_train(), planner.actor_infer()
        group = train.group
        assert group is not None and infer.group is None  # actor_train owns it
        bundles = placement_group_table(group)["bundles"]
        assert bundles == {0: {"CPU": 0.75}}  # one rank: 0.25 + both inference workers' 0.25
        for rank in range(2):
            strategy = infer.for_rank(rank)["scheduling_strategy"]
            assert strategy.placement_group.id == group.id and strategy.placement_group_bundle_index == 0
    finally:
        planner.release()
    assert placement_group_table(group)["state"] == "REMOVED"


@pytest.mark.parametrize("sections, message", [
    ({"placement": {"actor_infer": {"resources": {"gpu_node": 1}}}},
     r"placement.actor_infer: 1 workers need \{gpu_node: 1\} in all; the Ray cluster has \{gpu_node: 0\}"),
    ({"actor_train": {"num_gpus_per_worker": 1}}, r"actor_train.num_gpus_per_worker: .*\{GPU: 0\}"),
    ({"placement": {"actor_train": {"strategy": "PACK"}}}, r"placement.actor_train: a placement group bundle needs"),
])
def test_unmeetable_requests_name_the_key(ray_local, sections, message):
    planner = Planner(cfg(**sections))
    with pytest.raises(ConfigError, match=message):
        planner.actor_train()
        planner.actor_infer()
    planner.release()


def test_a_group_that_never_fits_times_out_with_what_is_free(ray_local):
    planner = Planner(cfg(domains={"d": {"reward": {
        "worker": "rlvr.workers.rewards.math_rule.MathRuleRewardWorker", "world_size": 2,
        "placement": {"strategy": "STRICT_SPREAD", "num_cpus_per_worker": 0.1}}}}))
    with pytest.raises(ConfigError, match=r"domains.d.reward.placement: placement group .* \(STRICT_SPREAD\) not "
                                          r"placed within ray.placement_timeout_s=2"):
        planner.reward("d")  # two nodes needed, one exists
    planner.release()
