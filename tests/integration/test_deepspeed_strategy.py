"""DeepSpeedStrategy (ZeRO-2 / ZeRO-3) against itself across world sizes and against TorchStrategy.

The issue's check: world_size 1 x 4 accumulation steps and world_size 2 x 2 accumulation steps give the same
parameters after one step. The ranks are real processes (torch.multiprocessing, spawn) joined in one gloo process
group (NCCL on a CUDA machine); each configuration ("job") runs in the same processes one after the other.

What is compared, and why:
  * the full gradient just before the optimizer step (deepspeed.utils.safe_get_full_grad) and the global grad
    norm: Adam's first update is about lr * sign(g), blind to an error that scales every gradient by a constant
    (e.g. forgetting that DeepSpeed averages over ranks), so gradients are the sharp test;
  * the parameter update (after - before, fp32 master weights): the issue's criterion;
  * logprobs of forward_logprobs, the loss metrics (identical on every rank), and a save / step / load round trip.

Tolerances. fp32 (bf16_autocast=False): only summation order differs, so gradients agree to 1e-5 relative (L2) and
updates to 1e-3 relative (Adam amplifies the noise of entries whose gradient is near its eps). bf16 (DeepSpeed bf16
weights and compute, fp32 masters and fp32 gradient accumulation): every micro-batch's forward and backward is
rounded to 8 bits of mantissa, and a different split rounds differently, so gradients agree to 2e-2 relative
(measured 4e-3) and updates to 0.1 relative (measured 2e-2: entries with tiny gradients flip Adam's sign, a
parameter may differ by 2 x lr); against fp32 TorchStrategy the bf16 gradients agree to 3e-2 (measured 6e-3) and
the updates to 0.25 (measured 8e-2). Dropping the x world_size compensation makes the world_size-2 gradients half
the right ones (relative error 0.5 to 1): the gradient and grad-norm checks fail, the update checks do not.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from tests.helpers.ranks import (deepspeed_step_capturing_grads, max_abs, rel, save_step_load_step, spawn_ranks,
                                 torch_step_capturing_grads, update)
from tests.helpers.train_batches import make_small_vocab_llama, make_train_batch

pytestmark = pytest.mark.slow
pytest.importorskip("deepspeed")

LR = 1e-3
WIDTH = 20
LORA = {"rank": 4, "alpha": 8.0}


# ---------------------------------------------------------------------------------------------- shared pieces
def make_batch(n: int, seed: int = 1):
    return make_train_batch(n, WIDTH, seed)


def train_cfg(micro: int, bf16: bool, mini: int | None = None, lora: bool = False):
    from rlvr.config.trainer import ActorTrainConfig

    # warmup_steps=2: the first step runs at lr/2, the second at lr, so a lost LR schedule shows after a load.
    return ActorTrainConfig(lr=LR, micro_batch_size=micro, mini_batch_size=mini, bf16_autocast=bf16,
                            max_grad_norm=1.0, weight_decay=0.01, warmup_steps=2, torch_threads=1,
                            lora=LORA if lora else None)


def make_loss_fn():
    from rlvr.algorithms.actor_objective import ObjectiveSettings, actor_objective

    settings = ObjectiveSettings(loss_agg_mode="token-mean", entropy_coef=0.01)

    def loss_fn(logp, entropy, micro, n_tokens, n_seqs):
        return actor_objective(logp, entropy, micro.tensors, settings, n_tokens, n_seqs)

    return loss_fn


JOBS = [  # name, ZeRO stage, bf16, micro-batch size, rows, round trip
    dict(name="z2_fp32", stage=2, bf16=False, micro=2, rows=8, roundtrip=True),  # the main job's precision
    dict(name="z2_fp32_uneven", stage=2, bf16=False, micro=3, rows=7),  # ranks get 4 / 3 rows: padding micro
    dict(name="z3_fp32_uneven", stage=3, bf16=False, micro=3, rows=7),  # ZeRO-3 gathers in every forward
    dict(name="z2_fp32_minibatch", stage=2, bf16=False, micro=2, rows=8, mini=4),  # two optimizer steps
    dict(name="z2_bf16", stage=2, bf16=True, micro=2, rows=8, roundtrip=True),
    dict(name="z3_bf16", stage=3, bf16=True, micro=2, rows=8, roundtrip=True),
    # fp32 weights, bf16 compute through DeepSpeed's torch_autocast: TorchStrategy's numerics
    dict(name="z2_autocast", stage=2, bf16=True, bf16_weights=False, micro=2, rows=8),
    dict(name="z3_autocast", stage=3, bf16=True, bf16_weights=False, micro=2, rows=8),
    # LoRA: only the adapters in the ZeRO optimizer; weights compared merged (the base model's names)
    dict(name="z2_fp32_lora", stage=2, bf16=False, micro=2, rows=8, roundtrip=True, lora=True),
    dict(name="z2_bf16_lora", stage=2, bf16=True, micro=2, rows=8, roundtrip=True, lora=True),
]


# ---------------------------------------------------------------------------------------------- rank processes
def _rank_main(rank: int, world_size: int, port: int, model_dir: str, out_dir: str) -> None:
    # spawn_ranks leaves the process group after it (a rank exiting with gloo up can abort: test_dist_exit.py)
    from rlvr.backends.deepspeed_strategy import DeepSpeedStrategy

    loss_fn = make_loss_fn()
    for job in JOBS:
        t0 = time.time()
        s = DeepSpeedStrategy(model_dir, train_cfg(job["micro"], job["bf16"], job.get("mini"), job.get("lora", False)),
                              total_steps=10,
                              seed=0, rank=rank, world_size=world_size, master_addr="127.0.0.1", master_port=port,
                              zero_stage=job["stage"], bf16_weights=job.get("bf16_weights", True))
        batch = make_batch(job["rows"])
        before = s.named_parameters_for_sync(torch.float32)
        logprobs = s.forward_logprobs(batch)
        logprobs_fp32 = s.forward_logprobs(batch, autocast=False)
        grads, metrics = deepspeed_step_capturing_grads(s, lambda: s.train_step(batch, loss_fn))
        after = s.named_parameters_for_sync(torch.float32)
        result = dict(before=before, after=after, grads=grads, metrics=metrics, logprobs=logprobs,
                      logprobs_fp32=logprobs_fp32, module=s.named_parameters_for_sync(torch.bfloat16))
        if job["name"] == "z2_fp32_uneven":  # a second step, returning its own forward's logprobs
            expected = s.forward_logprobs(batch, loss_positions_only=True)
            _, kept = s.train_step_with_logprobs(batch, loss_fn)
            result.update(update_logprobs=kept, update_logprobs_expected=expected)
        if job.get("roundtrip"):
            ckpt = str(Path(out_dir) / f"ckpt_{job['name']}")
            result.update(save_step_load_step(s, ckpt, lambda: s.train_step(batch, loss_fn)))
        result["seconds"] = time.time() - t0
        torch.save(result, Path(out_dir) / f"{job['name']}_rank{rank}.pt")
        del s
    for stage in (2, 3):  # frozen (reference-style): no optimizer; ZeRO-3 still shards the parameters
        s = DeepSpeedStrategy(model_dir, train_cfg(2, True), total_steps=10, seed=0, rank=rank, world_size=world_size,
                              master_addr="127.0.0.1", master_port=port, zero_stage=stage, trainable=False)
        torch.save({"logprobs": s.forward_logprobs(make_batch(8)),
                    "weights": s.named_parameters_for_sync(torch.bfloat16)},
                   Path(out_dir) / f"frozen_z{stage}_rank{rank}.pt")
        del s


def run_ranks(world_size: int, model_dir: str, out_dir: Path, timeout_s: float = 900) -> dict[str, dict]:
    out_dir.mkdir(parents=True, exist_ok=True)
    spawn_ranks(_rank_main, world_size, (model_dir, str(out_dir)), timeout_s)
    names = [job["name"] for job in JOBS] + ["frozen_z2", "frozen_z3"]
    return {name: {r: torch.load(out_dir / f"{name}_rank{r}.pt", weights_only=False) for r in range(world_size)}
            for name in names}


def torch_reference(model_dir: str, job: dict) -> dict:
    """TorchStrategy in fp32, one micro-batch per mini-batch: the single-process full-batch update."""
    from rlvr.backends.torch_strategy import TorchStrategy

    s = TorchStrategy(model_dir, train_cfg(job["rows"], bf16=False, mini=job.get("mini"), lora=job.get("lora", False)),
                      total_steps=10, seed=0)
    batch = make_batch(job["rows"])
    weights = lambda: {k: v.clone() for k, v in s.named_parameters_for_sync(torch.float32).items()}  # noqa: E731
    before = weights()  # copies: fp32 weights come back as the live tensors
    logprobs = s.forward_logprobs(batch)
    grads, metrics = torch_step_capturing_grads(s, lambda: s.train_step(batch, make_loss_fn()))
    return dict(before=before, after=weights(), grads=grads, metrics=metrics, logprobs=logprobs)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds")
    model_dir = make_small_vocab_llama(root / "tiny")
    t0 = time.time()
    w1 = run_ranks(1, model_dir, root / "w1")
    t1 = time.time()
    w2 = run_ranks(2, model_dir, root / "w2")
    t2 = time.time()
    ref = {job["name"]: torch_reference(model_dir, job) for job in JOBS}
    print(f"\nworld_size 1: {t1 - t0:.1f}s, world_size 2: {t2 - t1:.1f}s")
    print(f"{'job':16} {'grad W1~W2':>11} {'grad W2~torch':>13} {'upd W1~W2':>10} {'upd W2~torch':>12} "
          f"{'|upd| max':>9} {'param W1~W2':>11} {'gnorm W1/W2/torch':>26}")
    for job in JOBS:
        a, b, t = w1[job["name"]][0], w2[job["name"]][0], ref[job["name"]]
        print(f"{job['name']:16} {rel(a['grads'], b['grads']):11.2e} {rel(b['grads'], t['grads']):13.2e} "
              f"{rel(update(a), update(b)):10.2e} {rel(update(b), update(t)):12.2e} "
              f"{max(float(u.abs().max()) for u in update(b).values()):9.2e} {max_abs(a['after'], b['after']):11.2e} "
              f"{a['metrics']['grad_norm']:8.5f}/{b['metrics']['grad_norm']:8.5f}/{t['metrics']['grad_norm']:8.5f}")
    return w1, w2, ref, model_dir


TOL = {  # grad rel (W1~W2), grad rel (vs torch fp32), update rel (W1~W2), update rel (vs torch), grad_norm rel
    False: dict(grad=1e-5, grad_torch=1e-5, upd=1e-3, upd_torch=1e-3, gnorm=1e-5),
    True: dict(grad=2e-2, grad_torch=3e-2, upd=0.1, upd_torch=0.25, gnorm=5e-3),
}


@pytest.mark.parametrize("job", JOBS, ids=[j["name"] for j in JOBS])
def test_world_size_1x4_and_2x2_give_the_same_step(results, job):
    w1, w2, ref, _ = results
    a, b, t = w1[job["name"]][0], w2[job["name"]][0], ref[job["name"]]
    tol = TOL[job["bf16"]]
    assert rel(a["grads"], b["grads"]) < tol["grad"]
    assert rel(b["grads"], t["grads"]) < tol["grad_torch"]
    assert rel(a["grads"], t["grads"]) < tol["grad_torch"]
    assert rel(update(a), update(b)) < tol["upd"]
    assert rel(update(b), update(t)) < tol["upd_torch"]
    # the first call runs at lr/2 (warmup): Adam moves each entry by at most ~lr/2 per step (+ weight decay)
    n_updates = -(-job["rows"] // (job.get("mini") or job["rows"]))
    largest = max(float(u.abs().max()) for u in update(b).values())
    if job.get("lora"):  # B starts at 0: the merged weights move by scale * dB @ A, dB ~ lr/2 per entry
        assert set(b["grads"]) and all("lora_" in k for k in b["grads"]) and 0 < largest < LR
    else:
        assert 0.4 * LR < largest < n_updates * 0.6 * LR
    for m in (a["metrics"], b["metrics"]):
        assert m["grad_norm"] == pytest.approx(t["metrics"]["grad_norm"], rel=tol["gnorm"])
        assert m["loss"] == pytest.approx(t["metrics"]["loss"], rel=tol["gnorm"], abs=1e-6)
        assert m["updates"] == n_updates and m["lr"] == pytest.approx(LR / 2)  # the rate this call used: warmup 1/2
    # logprobs at real target positions (padding columns hold whatever each micro-batch's width left there)
    real = make_batch(job["rows"])["attention_mask"][:, 1:].bool()
    lp_tol = 1e-5 if not job["bf16"] else 5e-2
    assert float((a["logprobs"] - t["logprobs"])[real].abs().max()) < lp_tol
    assert float((b["logprobs"] - t["logprobs"])[real].abs().max()) < lp_tol
    if not job["bf16"] or job.get("bf16_weights") is False:  # fp32 weights: autocast=False is an fp32 forward
        assert float((b["logprobs_fp32"] - t["logprobs"])[real].abs().max()) < 1e-5


@pytest.mark.parametrize("job", JOBS, ids=[j["name"] for j in JOBS])
def test_every_rank_reports_the_same_metrics_and_rank0_the_weights(results, job):
    _, w2, _, _ = results
    r0, r1 = w2[job["name"]][0], w2[job["name"]][1]
    assert r0["metrics"] == r1["metrics"]
    assert torch.equal(r0["logprobs"], r1["logprobs"])
    assert r1["after"] == {} and len(r0["after"]) > 0  # named_parameters_for_sync: full tensors on rank 0 only


def test_logprobs_from_the_update_hold_every_ranks_rows(results):
    """train_step_with_logprobs with ranks of 4 and 3 rows (a padding micro-batch): every rank returns the whole
    batch's logprobs of the loss tokens, the forward's before the update."""
    w1, w2, _, _ = results
    for by_rank in (w1["z2_fp32_uneven"], w2["z2_fp32_uneven"]):
        for r in by_rank.values():
            assert r["update_logprobs"].shape == r["update_logprobs_expected"].shape == (7, WIDTH - 1)
            assert torch.allclose(r["update_logprobs"], r["update_logprobs_expected"], atol=1e-5)
            per_row = r["update_logprobs"].abs().sum(dim=1)  # row 1 has no loss tokens; each other row has some
            assert per_row[1] == 0 and bool((per_row[[0, 2, 3, 4, 5, 6]] > 0).all())


@pytest.mark.parametrize("job", [j for j in JOBS if j.get("roundtrip")], ids=lambda j: j["name"])
def test_save_step_load_restores_the_saved_state(results, job):
    from transformers import AutoModelForCausalLM

    _, w2, _, _ = results
    r = w2[job["name"]][0]
    moved = max_abs(r["after_second"], r["after"])
    assert moved > 0.5 * LR  # the step between save and load changed the parameters
    assert max_abs(r["after_load"], r["after"]) == 0.0  # load brought the saved fp32 masters back exactly
    # optimizer moments, LR schedule (warmup: this step runs at lr, not lr/2) and RNG came back too: the same
    # step from the same state gives the same parameters
    assert max_abs(r["after_second_again"], r["after_second"]) < 1e-7
    assert r["second_step_again"]["lr"] == r["second_step"]["lr"]
    if job.get("lora"):  # the adapters only, in peft's format, and DeepSpeed's files hold nothing else
        from rlvr.backends.lora import ADAPTER_WEIGHTS

        assert (Path(r["exported"]) / ADAPTER_WEIGHTS).exists()
        assert not (Path(r["exported"]).parent / "model").exists()
        states = torch.load(Path(r["exported"]).parent / "deepspeed" / "ckpt" / "mp_rank_00_model_states.pt",
                            weights_only=False)
        assert states["module"] == {} and not states.get("frozen_param_fragments")  # the base: model.path's

        def optimizer_bytes(ckpt: Path) -> int:
            return sum(f.stat().st_size for f in (ckpt / "deepspeed").rglob("*optim_states.pt"))
        full = Path(w2["z2_fp32"][0]["exported"]).parent
        # the adapters' masters and moments only (8,192 of the tiny model's 20,640 parameters, 0.4)
        assert optimizer_bytes(Path(r["exported"]).parent) < 0.5 * optimizer_bytes(full)
        return
    # the plain HF export in the checkpoint holds the saved weights
    exported = AutoModelForCausalLM.from_pretrained(r["exported"], dtype=torch.float32)
    named = {k: v.detach() for k, v in exported.named_parameters()}
    assert max_abs({k: named[k] for k in r["after"]}, r["after"]) == 0.0
    # ...and only there: under ZeRO-2 DeepSpeed's model-states file leaves the module's weights out, and its
    # optimizer-states files their fp32 partitions of the masters (a load takes both from the export, and the same
    # step above proves it did: with bf16 weights, masters refilled from the bf16 module would differ)
    if job["stage"] == 2:
        from deepspeed.checkpoint.constants import SINGLE_PARTITION_OF_FP32_GROUPS

        ds = Path(r["exported"]).parent / "deepspeed" / "ckpt"
        assert torch.load(ds / "mp_rank_00_model_states.pt", weights_only=False)["module"] == {}
        for optim in ds.glob("*optim_states.pt"):
            saved = torch.load(optim, weights_only=False)["optimizer_state_dict"]
            assert SINGLE_PARTITION_OF_FP32_GROUPS not in saved and saved["base_optimizer_state"]["state"], optim


@pytest.mark.parametrize("job", [j for j in JOBS if j["bf16"] and j.get("bf16_weights", True) and not j.get("lora")],
                         ids=lambda j: j["name"])
def test_the_bf16_module_is_the_dithered_rounding_of_the_masters(results, job):
    """After the step the module holds, for every weight, one of the two bf16 neighbours of its fp32 master, and
    not always the nearest one (rlvr/backends/bf16_rounding.py over DeepSpeed's round-to-nearest copy): the step
    moved the masters by ~lr / 2 = 5e-4 against bf16 steps of ~1e-4, so the nearest is the other neighbour for
    about half the weights that moved."""
    for runs in results[:2]:
        r = runs[job["name"]][0]
        differs = total = 0
        for name, master in r["after"].items():
            module = r["module"][name].float()
            step = torch.ldexp(torch.ones_like(master), torch.frexp(master.abs()).exponent - 8)
            assert bool(((module - master).abs() <= step).all()), name
            differs += int((r["module"][name] != master.to(torch.bfloat16)).sum())
            total += master.numel()
        assert 0.05 * total < differs < 0.95 * total


@pytest.mark.parametrize("stage", [2, 3])
def test_frozen_strategy_computes_the_same_logprobs(results, stage):
    """trainable=False (the reference worker's use): the same bf16 forward as the trainable strategy before its
    step, every rank the same result, and the full weights on rank 0."""
    from transformers import AutoModelForCausalLM

    w1, w2, _, model_dir = results
    real = make_batch(8)["attention_mask"][:, 1:].bool()
    for runs in (w1, w2):  # same world size, same micro-batches (bf16 results depend on the padded widths)
        frozen, trained_before = runs[f"frozen_z{stage}"][0]["logprobs"], runs["z2_bf16"][0]["logprobs"]
        assert float((frozen - trained_before)[real].abs().max()) < 1e-6
    assert torch.equal(w2[f"frozen_z{stage}"][0]["logprobs"], w2[f"frozen_z{stage}"][1]["logprobs"])
    assert w2[f"frozen_z{stage}"][1]["weights"] == {}
    initial = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    weights = w2[f"frozen_z{stage}"][0]["weights"]
    assert all(torch.equal(weights[k], p.detach().bfloat16()) for k, p in initial.named_parameters())
