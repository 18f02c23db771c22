"""The pipeline with generation.engine = vllm: vLLM inside the actor_infer Ray actor, weights synced in place
every step and checked against the trainer on a fixed sequence, per-domain validation, and no engine process
left behind once the pipeline is closed. Skipped only where `import vllm` fails (scripts/setup.sh installs it)."""

from __future__ import annotations

import json
import time

import psutil
import pytest
import ray

from rlvr.backends.vllm_engine import vllm_available
from rlvr.config.load import config_from_dict
from rlvr.data.types import SamplingParams
from rlvr.pipeline.rlvr_pipeline import RLVRPipeline
from tests.conftest import tiny_config

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not importable (scripts/setup.sh installs it)")]


def engine_processes() -> set[int]:
    """vLLM's engine-core and model-worker processes on this machine (they name themselves with setproctitle)."""
    found = set()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if cmd.startswith(("VLLM::EngineCore", "VLLM::Worker")):
            found.add(proc.info["pid"])
    return found


def test_two_steps_with_vllm_engine(tiny_vllm_model_dir, ray_local, tmp_path):
    before = engine_processes()  # another session's engines may be running on a shared machine
    tree = tiny_config(tiny_vllm_model_dir, str(tmp_path), generation={
        "engine": "vllm", "max_new_tokens": 12, "temperature": 1.0, "return_logprobs": True,
        "vllm": {"max_model_len": 1024}})
    pipeline = RLVRPipeline(config_from_dict(tree))
    try:
        pipeline.run()
        started = engine_processes() - before
        assert started, "the vllm engine runs in processes of its own"
        records = [json.loads(line) for line in (pipeline.run_dir / "metrics.jsonl").read_text().splitlines()]
        train_steps = [r for r in records if "actor/loss" in r]
        assert [r["step"] for r in train_steps] == [0, 1]
        for r in train_steps:
            print(f"\nstep {r['step']}: weight sync max abs logprob diff {r['actor/weight_sync_logprob_max_diff']:.2e}")
            assert r["actor/weight_sync_logprob_max_diff"] < 1e-4  # float32 on both sides
            assert r["batch/samples"] == 8
        assert [r["step"] for r in records if "val_correct/all/mean" in r] == [0, 1, 2]
        assert pipeline.weight_sync_diff() < 1e-4  # the engine holds the trained weights
        assert pipeline.clusters.actor_infer.first("policy_version") == 2
        stats = pipeline.clusters.actor_infer.first("stats")
        assert stats["sequences"] >= 16 and stats["tokens"] > 0

        # the schedulers' abort path: a request id aborted through the worker ends at once, the engine goes on
        worker, prompt = pipeline.clusters.actor_infer.workers[0], pipeline.sync_probe
        long = worker.generate.remote(prompt, 2, SamplingParams(max_new_tokens=900), "abort-me")
        time.sleep(1.0)
        start = time.monotonic()
        ray.get(worker.abort.remote(["abort-me"]))
        assert [g.finish_reason for g in ray.get(long, timeout=60)] == ["abort", "abort"]
        print(f"\nabort through the worker answered in {time.monotonic() - start:.2f}s")
        after = ray.get(worker.generate.remote(prompt, 1, SamplingParams(max_new_tokens=4)))
        assert after[0].finish_reason in ("stop", "length") and after[0].policy_version == 2
    finally:
        pipeline.close()
    deadline = time.monotonic() + 60
    while engine_processes() & started and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not engine_processes() & started, "vLLM engine processes outlived the pipeline"
