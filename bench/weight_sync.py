"""Weight sync, actor_train -> actor_infer, both paths side by side in one run:

    .venv/bin/python bench/weight_sync.py [--sizes 135m 360m 1b] [--workers 1 2] [--reps 3]

- object_store: rank 0's tensors through Ray's object store to each worker, which writes them to a safetensors
  file in /dev/shm for vLLM's engine process to reload (`actor_train.weight_sync: object_store`);
- collective: rank 0 broadcasts them in 256 MB buckets over a gloo group that ends in vLLM's model worker
  process, which reloads them as they arrive (`actor_train.weight_sync: collective`, the default).

The real workers do it: ActorTrainWorker (torch strategy, fp32 weights) and ActorInferWorker (vLLM, bfloat16:
the tensors sent are bf16) on local Ray, random Llama weights of each size. Time = one `WeightSync.push` (every
worker updated), median [min, max] over --reps, the two paths interleaved. GB/s = model bytes / time. After each
path the logprobs of a fixed sequence are compared (trainer fp32 vs engine bf16: a bf16-sized difference, the
same for both paths, shows the weights arrived). Sizes whose 2-worker run would not fit in the free memory are
run with 1 worker only, and the table says so.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# name: (hidden, layers, intermediate, heads, kv heads); vocabulary of the default model's tokenizer (49152), tied
SIZES = {"135m": (576, 30, 1536, 9, 3),  # SmolLM2-135M's shape
         "360m": (960, 32, 2560, 15, 5),  # SmolLM2-360M's shape
         "1b": (2048, 16, 5632, 16, 16)}


def make_model(out: Path, size: str, tokenizer_dir: str) -> tuple[str, int]:
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    hidden, layers, inter, heads, kv = SIZES[size]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=inter,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                         max_position_embeddings=2048, tie_word_embeddings=True, torch_dtype="bfloat16",
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    GenerationConfig(eos_token_id=tokenizer.eos_token_id).save_pretrained(out)
    del model
    return str(out), params


def free_gib() -> float:
    import psutil

    return psutil.virtual_memory().available / (1 << 30)


def run_size(size: str, model: str, params: int, args) -> list[dict]:
    import ray

    from rlvr.config.load import config_from_dict
    from rlvr.pipeline.weight_sync import WeightSync
    from rlvr.runtime.waiter import Waiter
    from rlvr.workers.actor_infer import ActorInferWorker
    from rlvr.workers.actor_train import ActorTrainWorker
    from rlvr.workers.clusters import ActorInferCluster, ActorTrainCluster

    gb = params * 2 / 1e9  # bf16 on the wire
    # trainer fp32 + its bf16 copy + the object store's; per worker: the engine's weights, the shm file and the
    # tensors the actor received (bf16 each), and ~1.5 GiB of processes (actor, engine core, model worker). The
    # 1b model with 2 workers needs ~27 GiB by this count: a 24 GiB box ran out of memory at its first sync.
    need = params * (4 + 2 + 2) / 2**30 + max(args.workers) * (params * 6 / 2**30 + 1.5) + 2
    workers = [n for n in args.workers if n == 1 or need < free_gib()]
    tree = {"data": {"train_files": ["unused.jsonl"]}, "model": {"path": model},
            "domains": {"d": {"reward": {"worker": "rlvr.workers.rewards.math_rule.MathRuleRewardWorker"}}},
            "generation": {"engine": "vllm", "dtype": "bfloat16", "world_size": max(workers),
                           "vllm": {"max_model_len": 128, "kv_cache_gib": 0.25}},
            "actor_train": {"bf16_autocast": False, "weight_sync_check_every": 0}}
    cfgs = {path: config_from_dict({**tree, "actor_train": {**tree["actor_train"], "weight_sync": path}})
            for path in ("object_store", "collective")}
    cfg = cfgs["collective"]
    train = ActorTrainCluster.start("actor_train", ActorTrainWorker, 1, cfg, model, rendezvous=True)
    infer = ActorInferCluster.start("actor_infer", ActorInferWorker, max(workers), cfg, model, max_concurrency=1000)
    probe = list(range(100, 164))
    rows = []
    try:
        for n in workers:
            view = ActorInferCluster("actor_infer", infer.workers[:n])  # the first n, as WeightSync sees a cluster
            # collective: a new group at its first push (the warm-up)
            syncs = {path: WeightSync(c, train, view, Waiter()) for path, c in cfgs.items()}
            for path, sync in syncs.items():  # warm-up: first reload, vLLM's set-up
                sync.push(0)
            times: dict[str, list[float]] = {path: [] for path in syncs}
            parity: dict[str, float] = {}
            version = 1
            for rep in range(args.reps):
                for path in (list(syncs) if rep % 2 == 0 else list(syncs)[::-1]):
                    start = time.perf_counter()
                    syncs[path].push(version)
                    times[path].append(time.perf_counter() - start)
                    ref = ray.get(train.workers[0].sequence_logprobs.remote([probe]))[0]
                    got = ray.get([w.sequence_logprobs.remote([probe]) for w in view.workers])
                    parity[path] = max(abs(a - b) for g in got for a, b in zip(ref[1:], g[0][1:]))
                    version += 1
            rows.append({"size": size, "params": params, "gb": gb, "workers": n, "times": times, "parity": parity})
        for n in args.workers:
            if n not in workers:
                rows.append({"size": size, "params": params, "gb": gb, "workers": n, "skipped": True})
    finally:
        # vLLM's engine processes and their shared-memory queues go with `close`, not with the actor (a bare kill
        # left 6 /dev/shm/psm_* segments per run)
        ray.get(infer.call("close"), timeout=60)
        train.kill()
        infer.kill()
    return rows


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import ray

    from rlvr.models.default_model import ensure_default_model

    tokenizer_dir = ensure_default_model()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}})
    rows = []
    try:
        for size in args.sizes:
            with tempfile.TemporaryDirectory(prefix=f"rlvr-bench-ws-{size}-") as tmp:
                model, params = make_model(Path(tmp), size, tokenizer_dir)
                rows += run_size(size, model, params, args)
    finally:
        ray.shutdown()
    print(f"\nweight sync actor_train -> actor_infer (vLLM, bf16 on the wire); {args.reps} reps, paths interleaved; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, local Ray")
    print(f"{'size':>5} {'params':>7} {'GB':>5} {'workers':>7} | {'object store s':>20} {'GB/s':>5} | "
          f"{'collective s':>20} {'GB/s':>5} | {'speed-up':>8} | {'parity |dlogp| os / coll':>24}")
    for r in rows:
        head = f"{r['size']:>5} {r['params'] / 1e6:>6.0f}M {r['gb']:>5.2f} {r['workers']:>7}"
        if r.get("skipped"):
            print(f"{head} | skipped: the 2-worker run would not fit in the free memory")
            continue
        os_t, co_t = (statistics.median(r["times"][p]) for p in ("object_store", "collective"))
        print(f"{head} | {spread(r['times']['object_store']):>20} {r['gb'] / os_t:>5.2f} | "
              f"{spread(r['times']['collective']):>20} {r['gb'] / co_t:>5.2f} | {os_t / co_t:>7.2f}x | "
              f"{r['parity']['object_store']:>11.3g} / {r['parity']['collective']:<11.3g}")


if __name__ == "__main__":  # vLLM spawns its engine processes: the guard is required
    main()
