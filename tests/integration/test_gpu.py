"""The GPU path (marker `gpu`: skipped where torch sees no CUDA device; some tests need two). Not run on the CPU
machines this project is developed on: written to run as is on a CUDA host with vLLM's CUDA build
(`RLVR_VLLM=cuda bash scripts/setup.sh`), with `pytest -m gpu`.

- both training strategies train on the GPU;
- the collective weight-sync group over NCCL between two GPUs, exact to the bit;
- vLLM on the GPU: generate, weights in place, logprobs;
- the pipeline end to end on one GPU (actor_train and actor_infer share it: weight sync falls back to gloo,
  which the run reports) and on two (NCCL), and with tensor parallelism 2.
"""

from __future__ import annotations

import json
import multiprocessing as mp

import pytest
import torch

from tests.conftest import tiny_config
from tests.helpers.train_batches import make_small_vocab_llama, make_train_batch

pytestmark = [pytest.mark.slow, pytest.mark.gpu]
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")


def loss_fn(logp, entropy, micro, n_tokens, n_seqs):
    from rlvr.algorithms.actor_objective import ObjectiveSettings, actor_objective

    return actor_objective(logp, entropy, micro.tensors, ObjectiveSettings(), n_tokens, n_seqs)


@pytest.mark.parametrize("strategy", ["torch", "deepspeed"])
def test_strategies_train_on_the_gpu(strategy, tmp_path):
    from rlvr.backends.dist import free_port
    from rlvr.config.trainer import ActorTrainConfig

    model = make_small_vocab_llama(tmp_path / "m")
    cfg = ActorTrainConfig(strategy=strategy, lr=1e-3, micro_batch_size=4, bf16_autocast=True)
    if strategy == "torch":
        from rlvr.backends.torch_strategy import TorchStrategy

        s = TorchStrategy(model, cfg, total_steps=2, seed=0)
    else:
        from rlvr.backends.deepspeed_strategy import DeepSpeedStrategy

        s = DeepSpeedStrategy(model, cfg, total_steps=2, seed=0, rank=0, world_size=1, master_addr="127.0.0.1",
                              master_port=free_port(), bf16_weights=True)
    before = {n: t.float().clone() for n, t in s.named_parameters_for_sync(torch.float32).items()}
    metrics = s.train_step(make_train_batch(8, 16), loss_fn)
    after = s.named_parameters_for_sync(torch.float32)
    assert s.device.type == "cuda" and torch.isfinite(torch.tensor(metrics["grad_norm"]))
    assert max(float((after[n] - before[n]).abs().max()) for n in before) > 0


def _nccl_receiver(address, out):
    from rlvr.backends.weight_sync import WeightGroup

    torch.cuda.set_device(1)
    group = WeightGroup.join(address, 1, 2, "nccl", "127.0.0.1", 120)
    for version in (1, 2):
        got = dict(group.receive(group.plan(version)))
        out.put({n: t.cpu() for n, t in got.items()})


@two_gpus
def test_nccl_weight_group_between_two_gpus():
    from rlvr.backends.weight_sync import WeightGroup

    torch.cuda.set_device(0)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    sender = WeightGroup.host_group(2, "nccl", "127.0.0.1", 120)
    proc = ctx.Process(target=_nccl_receiver, args=(sender.address, out))
    proc.start()
    try:
        sender.connect()
        sent = []
        for version in (1, 2):
            g = torch.Generator().manual_seed(version)
            weights = {"a": torch.randn(300, 7, generator=g).to(torch.bfloat16), "b": torch.randn(5, generator=g)}
            sender.send(weights, version, bucket_bytes=1024)
            sent.append(weights)
        got = [out.get(timeout=120) for _ in sent]
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    for w, r in zip(sent, got):
        assert all(torch.equal(w[n], r[n]) for n in w)


def test_vllm_engine_on_the_gpu(tiny_vllm_model_dir):
    import asyncio

    from transformers import AutoModelForCausalLM

    from rlvr.backends.vllm_engine import VLLMEngine
    from rlvr.data.types import SamplingParams

    async def run():
        engine = VLLMEngine(tiny_vllm_model_dir, dtype="bfloat16", max_model_len=256, gpu_memory_utilization=0.2)
        try:
            gens = await engine.generate([1, 2, 3, 4], 2, SamplingParams(8), "r1")
            model = AutoModelForCausalLM.from_pretrained(tiny_vllm_model_dir)
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(0.5)
            await engine.load_weights({n: p.to(torch.bfloat16) for n, p in model.named_parameters()}, 1)
            lp = await engine.compute_logprobs([[1, 2, 3, 4, 5]])
            return gens, lp, engine.policy_version()
        finally:
            engine.shutdown()

    gens, lp, version = asyncio.run(run())
    assert len(gens) == 2 and all(len(g.token_ids) > 0 for g in gens)
    assert version == 1 and len(lp[0]) == 5 and all(v <= 0 for v in lp[0][1:])


def pipeline_records(tree: dict):
    from rlvr.config.load import config_from_dict
    from rlvr.pipeline.rlvr_pipeline import RLVRPipeline

    pipeline = RLVRPipeline(config_from_dict(tree))
    try:
        pipeline.run()
        backend = pipeline.clusters.weight_sync.backend
        records = [json.loads(line) for line in (pipeline.run_dir / "metrics.jsonl").read_text().splitlines()]
    finally:
        pipeline.close()
    return backend, [r for r in records if "actor/loss" in r]


def gpu_tree(model_dir, out, **generation):
    return tiny_config(model_dir, out, run={"max_steps": 2, "eval_every": 0},
                       generation={"engine": "vllm", "dtype": "bfloat16", "max_new_tokens": 12,
                                   "vllm": {"max_model_len": 512, "gpu_memory_utilization": 0.2}, **generation},
                       actor_train={"lr": 1e-2, "micro_batch_size": 4, "bf16_autocast": True})


def test_pipeline_on_one_gpu(tiny_vllm_model_dir, ray_local, tmp_path):
    tree = gpu_tree(tiny_vllm_model_dir, str(tmp_path), num_gpus_per_worker=0.5)
    tree["actor_train"]["num_gpus_per_worker"] = 0.5
    backend, steps = pipeline_records(tree)
    assert backend == "gloo"  # one device for both sides: NCCL cannot, the group goes through CPU memory
    assert [r["step"] for r in steps] == [0, 1]
    assert all(r["actor/weight_sync_logprob_max_diff"] < 0.5 and r["batch/samples"] == 8 for r in steps)


@two_gpus
@pytest.mark.parametrize("tp", [1, 2])
def test_pipeline_nccl_weight_sync_on_separate_gpus(tiny_vllm_model_dir, ray_local, tmp_path, tp):
    if tp == 2 and torch.cuda.device_count() < 3:
        pytest.skip("actor_train on one GPU plus tensor parallelism 2 needs three")
    backend, steps = pipeline_records(gpu_tree(tiny_vllm_model_dir, str(tmp_path), tensor_parallel_size=tp))
    assert backend == "nccl"
    assert [r["step"] for r in steps] == [0, 1]
    assert all(r["actor/weight_sync_logprob_max_diff"] < 0.5 and r["weight_sync/gb"] > 0 for r in steps)
