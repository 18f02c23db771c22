"""The critic on DeepSpeed ZeRO: world_size 1 x 4 micro-batches and world_size 2 x 2 give the same value-model
step (the actor's check, tests/integration/test_deepspeed_strategy.py, for the value model), and both match the
single-process fp32 TorchStrategy; a ZeRO-3 save / step / load round trip restores the critic, and so does a
ZeRO-2 one of a LoRA critic (adapters on the backbone, the value head in full, the checkpoint without the base).

Tolerances as in the actor's test: fp32 gradients agree to 1e-5 relative (only summation order differs), updates to
1e-3; bf16 (bf16 weights and compute, fp32 masters) gradients to 3e-2 and updates to 0.25 against fp32 torch.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from tests.helpers.ranks import (deepspeed_step_capturing_grads, max_abs, rel, save_step_load_step, spawn_ranks,
                                 torch_step_capturing_grads, update)
from tests.helpers.train_batches import make_critic_batch, make_small_vocab_llama, value_loss_fn

pytestmark = pytest.mark.slow
pytest.importorskip("deepspeed")

LR = 1e-3
ROWS, MICRO, WIDTH = 8, 2, 20
JOBS = [dict(name="z2_fp32", stage=2, bf16=False),
        dict(name="z3_bf16", stage=3, bf16=True, roundtrip=True),
        # critic.lora: adapters on the backbone, the value head in full; weights compared merged
        dict(name="z2_fp32_lora", stage=2, bf16=False, roundtrip=True, lora=True)]


def critic_cfg(micro: int, bf16: bool, lora: bool = False):
    from rlvr.config.trainer import CriticConfig

    return CriticConfig(lr=LR, micro_batch_size=micro, bf16_autocast=bf16, max_grad_norm=1.0, weight_decay=0.01,
                        warmup_steps=2, torch_threads=1, lora={"rank": 4} if lora else None)


def _rank_main(rank: int, world_size: int, port: int, model_dir: str, out_dir: str) -> None:
    from rlvr.backends.deepspeed_strategy import DeepSpeedStrategy
    from rlvr.backends.value_spec import value_spec

    loss_fn = value_loss_fn()
    batch = make_critic_batch(ROWS, WIDTH)
    for job in JOBS:
        s = DeepSpeedStrategy(model_dir, critic_cfg(MICRO, job["bf16"], job.get("lora", False)), total_steps=10,
                              seed=rank, rank=rank, world_size=world_size, master_addr="127.0.0.1", master_port=port,
                              zero_stage=job["stage"], spec=value_spec(head_seed=7))
        values = s.forward_columns(batch, lambda out, micro, start: out, loss_positions_only=True)
        before = s.named_parameters_for_sync(torch.float32)
        grads, metrics = deepspeed_step_capturing_grads(s, lambda: s.update(batch, loss_fn))
        result = dict(values=values, before=before, after=s.named_parameters_for_sync(torch.float32), grads=grads,
                      metrics=metrics)
        if job.get("roundtrip"):
            ckpt = str(Path(out_dir) / f"ckpt_{job['name']}")
            result.update(save_step_load_step(s, ckpt, lambda: s.update(batch, loss_fn)))
        torch.save(result, Path(out_dir) / f"{job['name']}_rank{rank}.pt")
        del s


def run_ranks(world_size: int, model_dir: str, out_dir: Path) -> dict[str, dict]:
    out_dir.mkdir(parents=True, exist_ok=True)
    spawn_ranks(_rank_main, world_size, (model_dir, str(out_dir)))
    return {job["name"]: {r: torch.load(out_dir / f"{job['name']}_rank{r}.pt", weights_only=False)
                          for r in range(world_size)} for job in JOBS}


def torch_reference(model_dir: str, lora: bool = False) -> dict:
    """TorchStrategy, fp32, the whole batch in one micro-batch."""
    from rlvr.backends.torch_strategy import TorchStrategy
    from rlvr.backends.value_spec import value_spec

    s = TorchStrategy(model_dir, critic_cfg(ROWS, False, lora), total_steps=10, seed=0, spec=value_spec(head_seed=7))
    batch = make_critic_batch(ROWS, WIDTH)
    values = s.forward_columns(batch, lambda out, micro, start: out, loss_positions_only=True)
    weights = lambda: {k: v.clone() for k, v in s.named_parameters_for_sync(torch.float32).items()}  # noqa: E731
    before = weights()
    grads, metrics = torch_step_capturing_grads(s, lambda: s.update(batch, value_loss_fn()))
    return dict(values=values, before=before, after=weights(), grads=grads, metrics=metrics)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds-critic")
    model_dir = make_small_vocab_llama(root / "tiny")
    t0 = time.time()
    w1, w2 = run_ranks(1, model_dir, root / "w1"), run_ranks(2, model_dir, root / "w2")
    refs = {lora: torch_reference(model_dir, lora) for lora in (False, True)}
    print(f"\ncritic ranks: {time.time() - t0:.1f}s")
    for job in JOBS:
        a, b, ref = w1[job["name"]][0], w2[job["name"]][0], refs[job.get("lora", False)]
        print(f"{job['name']}: grad W1~W2 {rel(a['grads'], b['grads']):.2e}, "
              f"W2~torch {rel(b['grads'], ref['grads']):.2e}"
              f", update W1~W2 {rel(update(a), update(b)):.2e}, W2~torch {rel(update(b), update(ref)):.2e}")
    return w1, w2, refs


TOL = {False: dict(grad=1e-5, grad_torch=1e-5, upd=1e-3, upd_torch=1e-3, metric=1e-5, values=1e-5),
       True: dict(grad=2e-2, grad_torch=3e-2, upd=0.1, upd_torch=0.25, metric=2e-2, values=5e-2)}


@pytest.mark.parametrize("job", JOBS, ids=[j["name"] for j in JOBS])
def test_critic_world_size_1x4_and_2x2_give_the_same_step(results, job):
    w1, w2, refs = results
    a, b, tol, ref = w1[job["name"]][0], w2[job["name"]][0], TOL[job["bf16"]], refs[job.get("lora", False)]
    if job.get("lora"):  # only the adapters and the whole value head train
        assert "value_head.weight" in b["grads"] and all("lora_" in k for k in set(b["grads"]) - {"value_head.weight"})
    assert rel(a["grads"], b["grads"]) < tol["grad"]
    assert rel(b["grads"], ref["grads"]) < tol["grad_torch"]
    assert rel(update(a), update(b)) < tol["upd"]
    assert rel(update(b), update(ref)) < tol["upd_torch"]
    for m in (a["metrics"], b["metrics"]):
        for key in ("value_loss", "grad_norm", "vpred_mean"):
            assert m[key] == pytest.approx(ref["metrics"][key], rel=tol["metric"], abs=1e-6), key
        assert m["clipfrac"] == pytest.approx(ref["metrics"]["clipfrac"], abs=0.05 if job["bf16"] else 1e-6)
    assert b["metrics"] == w2[job["name"]][1]["metrics"]  # every rank reports the same
    assert float((b["values"] - ref["values"]).abs().max()) < tol["values"]  # values gathered into their rows
    assert torch.equal(b["values"], w2[job["name"]][1]["values"])


@pytest.mark.parametrize("name", [j["name"] for j in JOBS if j.get("roundtrip")])
def test_critic_save_step_load_round_trip(results, name):
    from rlvr.backends.lora import ADAPTER_WEIGHTS, load_adapter
    from rlvr.models.value_model import ValueModel

    _, w2, _ = results
    r = w2[name][0]
    assert max_abs(r["after_second"], r["after"]) > 0.5 * LR  # the step between save and load moved the critic
    assert max_abs(r["after_load"], r["after"]) == 0.0
    assert max_abs(r["after_second_again"], r["after_second"]) < 1e-7  # optimizer, schedule and RNG came back
    assert r["second_step_again"]["lr"] == r["second_step"]["lr"]
    if name.endswith("lora"):  # the adapters and the head, nothing else
        saved = load_adapter(r["exported"], ["value_head.weight"])
        assert torch.equal(saved["value_head.weight"], r["after"]["value_head.weight"])
        full_bytes = sum(v.numel() * 4 for v in r["after"].values())
        assert (Path(r["exported"]) / ADAPTER_WEIGHTS).stat().st_size < 0.5 * full_bytes
        return
    exported = ValueModel.from_pretrained(r["exported"], head_seed=0)  # a critic.model_path for a later run
    assert max_abs({k: v.detach() for k, v in exported.named_parameters()}, r["after"]) == 0.0
