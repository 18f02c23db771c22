"""The typed clusters name real worker methods: every string a typed cluster sends is a method of its worker class
(a rename on one side fails here, not in a run's first step)."""

from __future__ import annotations

import ast
import inspect

import pytest

from rlvr.workers import clusters
from rlvr.workers.actor_infer import ActorInferWorker
from rlvr.workers.actor_train import ActorTrainWorker, ReferenceWorker
from rlvr.workers.critic import CriticWorker
from rlvr.workers.rewards.reward_actor import RewardActor

WORKERS = {clusters.ActorTrainCluster: ActorTrainWorker, clusters.CriticCluster: CriticWorker,
           clusters.ReferenceCluster: ReferenceWorker, clusters.ActorInferCluster: ActorInferWorker,
           clusters.RewardCluster: RewardActor}
DISPATCH = {"call", "gather", "first", "collective", "collective_async"}


def names_sent(source: str) -> set[str]:
    """The string first arguments of Cluster's generic calls (self.collective("train", ...)) in `source`."""
    return {node.args[0].value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in DISPATCH
            and node.args and isinstance(node.args[0], ast.Constant)}


def sent_methods(cls: type) -> set[str]:
    """What `cls` and its typed bases send."""
    return set().union(*(names_sent(inspect.getsource(k)) for k in cls.__mro__ if k.__module__ == clusters.__name__))


@pytest.mark.parametrize("cluster_cls", list(WORKERS), ids=lambda c: c.__name__)
def test_every_method_a_typed_cluster_sends_exists_on_its_worker(cluster_cls):
    names = sent_methods(cluster_cls)
    assert names, "a typed cluster that sends nothing"
    worker = WORKERS[cluster_cls]
    assert [n for n in sorted(names) if not callable(getattr(worker, n, None))] == []


def test_the_check_sees_a_misspelt_method():
    source = "class Misspelt(Cluster):\n    def train(self, batch):\n        return self.collective('trian', batch)\n"
    assert names_sent(source) == {"trian"} and not hasattr(ActorTrainWorker, "trian")
