"""The driver's forward passes (reference logprobs, old-policy logprobs, critic values) are in flight together: each
fake worker (named as such; the forwards themselves are tested elsewhere) waits at a barrier until all three have
been called, so a driver that waited for one before launching the next would time out here."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rlvr.config.load import config_from_dict
from rlvr.pipeline.build import Clusters
from rlvr.pipeline.faults import FaultLog
from rlvr.pipeline.parts import PipelineParts
from rlvr.pipeline.rlvr_pipeline import RLVRPipeline
from rlvr.runtime.waiter import Waiter
from rlvr.workers.clusters import ActorTrainCluster, CriticCluster, ReferenceCluster
from tests.conftest import tiny_config
from tests.helpers.fakes import BarrierForTest, FakeForwardWorkerForTest
from tests.helpers.groups import group

pytestmark = pytest.mark.slow


def test_reference_old_logprobs_and_values_are_computed_together(ray_local, tiny_model_dir, tmp_path):
    import ray

    from rlvr.pipeline.batching import make_train_batch

    cfg = config_from_dict(tiny_config(tiny_model_dir, str(tmp_path), algorithm={"preset": "ppo"}))
    barrier = ray.remote(BarrierForTest).remote(3)
    kinds = {"actor_train": ActorTrainCluster, "reference": ReferenceCluster, "critic": CriticCluster}
    clusters = {name: kinds[name].start(name, FakeForwardWorkerForTest, 1, barrier, value, max_concurrency=4)
                for name, value in (("actor_train", -1.0), ("reference", -2.0), ("critic", 0.5))}
    parts = PipelineParts(run_dir=tmp_path, tokenizer=None, waiter=Waiter(), faults=FaultLog(None),
                          clusters=Clusters(clusters["actor_train"], None, clusters["reference"], clusters["critic"],
                                            {}),
                          schedulers=None, trackers=SimpleNamespace(), system=SimpleNamespace())
    driver = RLVRPipeline(cfg, parts)  # on these parts: nothing else is started
    batch, _, _ = make_train_batch({"arithmetic": [group("arithmetic", "g", [1.0, 0.0])]}, ["arithmetic"],
                                   pad_id=0, seed=0)
    try:
        out = driver.forwards(batch)
    finally:
        for c in clusters.values():
            c.kill()
        ray.kill(barrier)
    mask = batch["loss_mask"]
    assert torch.equal(out["old_logp"], -1.0 * mask)  # the KL in the reward needs the samples' policy
    assert torch.equal(out["ref_logp"], -2.0 * mask)
    assert torch.equal(out["values"], 0.5 * mask)
