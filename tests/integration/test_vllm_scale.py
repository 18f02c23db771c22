"""vLLM with several processes per inference worker and several workers, on CPU:

- tensor_parallel_size 2: the engine runs two model worker processes, both join the collective weight-sync group
  (ranks 1 and 2 beside the trainer's 0) and reload what rank 0 broadcasts; the logprob parity probe after every
  step shows both shards hold the trained weights;
- generation.world_size 2: the two engines serve every domain's requests through the router, least outstanding
  first, and both receive the broadcast.
Skipped only where `import vllm` fails (scripts/setup.sh installs it).
"""

from __future__ import annotations

import json

import psutil
import pytest
import ray

from rlvr.backends.vllm_engine import vllm_available
from rlvr.config.load import config_from_dict
from rlvr.pipeline.rlvr_pipeline import RLVRPipeline
from tests.conftest import tiny_config

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not importable (scripts/setup.sh installs it)")]


def model_workers() -> set[int]:
    """vLLM model-worker processes on this machine (named by setproctitle; another session's may run too)."""
    return {p.info["pid"] for p in psutil.process_iter(["pid", "cmdline"])
            if " ".join(p.info["cmdline"] or []).startswith("VLLM::Worker")}


def run(tree: dict):
    before = model_workers()
    pipeline = RLVRPipeline(config_from_dict(tree))
    try:
        pipeline.run()
        workers = model_workers() - before
        router = ray.get(pipeline.clusters.router.stats.remote()) if pipeline.clusters.router else None
        records = [json.loads(line) for line in (pipeline.run_dir / "metrics.jsonl").read_text().splitlines()]
        pipeline.step += 1  # the last step's trained weights, synced and probed once more
        diff = pipeline.model_update()["actor/weight_sync_logprob_max_diff"]
    finally:
        pipeline.close()
    return [r for r in records if "actor/loss" in r], workers, router, diff


def vllm_tree(model_dir, out, **generation):
    return tiny_config(model_dir, out, run={"max_steps": 2, "eval_every": 0},
                       generation={"engine": "vllm", "max_new_tokens": 8, "torch_threads": 1,
                                   "vllm": {"max_model_len": 512, "kv_cache_gib": 0.25}, **generation})


def test_tensor_parallel_workers_both_receive_the_broadcast(tiny_vllm_model_dir, ray_local, tmp_path):
    steps, workers, router, diff = run(vllm_tree(tiny_vllm_model_dir, str(tmp_path), tensor_parallel_size=2))
    assert len(workers) >= 2  # two model worker processes for the one engine
    assert router is None and [r["step"] for r in steps] == [0, 1]
    for r in steps:  # trained weights on both shards: a shard left behind would show in the probe's logprobs
        assert r["weight_sync/gb"] > 0 and r["actor/weight_sync_logprob_max_diff"] < 1e-4
    assert diff < 1e-4


def test_two_engines_share_every_domain_through_the_router(tiny_vllm_model_dir, ray_local, tmp_path):
    steps, _, router, diff = run(vllm_tree(tiny_vllm_model_dir, str(tmp_path), world_size=2))
    assert [r["step"] for r in steps] == [0, 1] and diff < 1e-4
    assert all(r["actor/weight_sync_logprob_max_diff"] < 1e-4 for r in steps)  # both engines checked
    served = router["served"]
    assert min(served) > 0 and sum(served) == 2 * 8  # two steps of 4 prompts x 2 samples
    assert abs(served[0] - served[1]) <= 4, served  # balanced within two requests' worth
    assert router["outstanding"] == [0, 0]
