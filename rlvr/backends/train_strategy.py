"""What the training strategies (torch, deepspeed) share: this rank's micro-batches of a batch, the logprob pass
and the PPO update loop with global-token-count normalisation. A strategy supplies the model call and the
optimizer mechanics through five small hooks.

Normalisation, so that any split gives the single-process full-batch update: every micro-batch's loss is
normalised by the token / sequence count of its WHOLE mini-batch (every rank holds the whole mini-batch, so the
count needs no communication), and the micro-batch gradients are summed, never averaged.

Data parallelism: every rank receives the same full batch and takes rows rank, rank+W, rank+2W, ... of each
mini-batch, in micro-batches. Every rank runs the same number of forward/backward passes (ZeRO-2 reduces
gradients during every backward, ZeRO-3 gathers parameters during every forward); a rank whose share has fewer
micro-batches runs padding micro-batches whose loss is multiplied by 0.

Compute that the loss never sees is skipped, without changing the update (the normalisation above makes the sum
of micro-batch gradients independent of how rows are grouped):
  * a rank's rows are grouped into micro-batches by length, so short rows are not padded to long ones;
  * logits (lm_head and the vocabulary-wide logsumexp, a large share of a small model's compute) are computed
    only from the first response token of a micro-batch on (`logits_to_keep`): prompt positions have no loss.

What is trained is a `ModelSpec`: a causal LM for actor_train and the reference (`CAUSAL_LM`, logits), or the
critic's value model (rlvr/models/value_model.py, values). The micro-batching, normalisation, sharding and
checkpoint code above is the same for both; `update` is the generic loop and `train_step` its policy form.
"""

from __future__ import annotations

import abc
import functools
import inspect
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from rlvr.backends import dist as rdist
from rlvr.backends.logprobs import token_logprobs, token_logprobs_and_entropy
from rlvr.data.batch import TrainBatch
from rlvr.data.packing import balanced_bins, pack_units, packed_unit_ids, prefix_lengths, prefix_units, unit_tokens
from rlvr.models.segment_attention import segment_kwargs, use_segment_attention

if TYPE_CHECKING:  # only torch and transformers at run time (scripts/gpu_check.py runs without pydantic)
    from rlvr.config.trainer import TrainerConfig

# The policy's loss: (logp, entropy, micro-batch, global token count, global sequence count) -> (loss, stats).
LossFn = Callable[[torch.Tensor, torch.Tensor, TrainBatch, torch.Tensor, torch.Tensor],
                  tuple[torch.Tensor, dict[str, torch.Tensor]]]
# Any model's loss: (model output from the micro-batch's first loss column on, the micro-batch's loss tensors
# from that column on, global token count, global sequence count) -> (loss, stats).
MicroLossFn = Callable[[torch.Tensor, TrainBatch, torch.Tensor, torch.Tensor],
                       tuple[torch.Tensor, dict[str, torch.Tensor]]]


def loss_counts(mini: TrainBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """The global token and sequence counts a mini-batch's loss is averaged over (every micro-batch's share is
    divided by them): those of `count_mask` where the driver set one (the rollout correction's fixed
    denominator: rejected tokens still counted), else of `loss_mask`."""
    mask = mini.get("count_mask")
    mask = mini["loss_mask"] if mask is None else mask
    return mask.sum(), (mask.sum(dim=1) > 0).sum()


@dataclass(frozen=True)
class ModelSpec:
    """What a strategy trains: how to load it (fp32), run it on ids from target column `start` on, and export
    full weights as a directory `load` reads back."""

    load: Callable[[str], torch.nn.Module]
    forward: Callable[[torch.nn.Module, torch.Tensor, torch.Tensor, int], torch.Tensor]
    export: Callable[[dict[str, torch.Tensor], object, Path], None]
    # Packed rows (rlvr/data/packing.py): (model, input_ids [1, L], position_ids [1, L], keep [K], the rows' segment
    # kwargs for the attention layers (rlvr/models/segment_attention.py)) -> the output at stream positions `keep`
    forward_packed: Callable[[torch.nn.Module, torch.Tensor, torch.Tensor, torch.Tensor, dict],
                             torch.Tensor] | None = None
    # Parameters (by name prefix) that train in full also under LoRA: parts the base model does not have (a value
    # head), which no low-rank change of a pretrained weight can stand for
    also_trained: tuple[str, ...] = ()


class TrainStrategy(abc.ABC):
    cfg: TrainerConfig
    spec: ModelSpec
    device: torch.device
    rank: int = 0
    world_size: int = 1
    trainable: bool = True
    optimizer: torch.optim.Optimizer | None = None
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None

    # ------------------------------------------------------------------ hooks
    @abc.abstractmethod
    def _set_train_mode(self, train: bool) -> None:
        """The model in train or eval mode (dropout)."""

    def _run_spec(self, model: torch.nn.Module, micro: TrainBatch, start: int) -> torch.Tensor:
        """`self.spec`'s output for target columns start..T-2 of `micro`'s rows: from the padded rows, or (packing)
        from one packed stream with no pad tokens, scattered back to the rows (the same tensor, within float
        rounding)."""
        ids = micro["input_ids"].to(self.device)
        if not self.packs:
            return self.spec.forward(model, ids, micro["attention_mask"].to(self.device), start)
        lengths, prefixes, units = self._units(micro)
        layout = pack_units(lengths, prefixes, units, start)
        out = self.spec.forward_packed(model, packed_unit_ids(ids, lengths, prefixes, units),
                                       layout.position_ids.to(self.device), layout.keep.to(self.device),
                                       segment_kwargs(list(layout.unit_lengths), self.device, layout.unit_masks))
        return layout.scatter(out, len(lengths), ids.shape[1] - 1 - start)

    def _units(self, batch: TrainBatch) -> tuple[list[int], list[int], list[list[int]]]:
        """The rows' lengths, prompt lengths and packed units: rows that share a prompt together
        (cfg.share_prompt_prefix), every other row alone (rlvr/data/packing.py)."""
        lengths = batch["attention_mask"].sum(dim=1).tolist()
        if not self.cfg.share_prompt_prefix:
            return lengths, lengths, [[b] for b in range(len(lengths))]
        prefixes = prefix_lengths(batch["loss_mask"], lengths) if "loss_mask" in batch.tensors else lengths
        return lengths, prefixes, prefix_units(batch["input_ids"], lengths, prefixes)

    @abc.abstractmethod
    def _forward(self, micro: TrainBatch, *, train: bool, autocast: bool = True, start: int = 0) -> torch.Tensor:
        """The model's output for target columns start..T-2 (`self.spec.forward`): [B, T-1-start, V] logits
        predicting input_ids[:, 1+start:] for a causal LM (see `causal_lm_logits`), [B, T-1-start] values for the
        critic."""

    def _begin_micro(self, first: bool, last: bool) -> None:
        """Before each micro-batch's forward of a mini-batch (zero the gradients, mark the accumulation end)."""

    @abc.abstractmethod
    def _backward(self, loss: torch.Tensor) -> None:
        """Gradients of `loss` (accumulated over a mini-batch's micro-batches)."""

    @abc.abstractmethod
    def _optimizer_step(self) -> float:
        """Clip, step; returns the global gradient norm before clipping."""

    @abc.abstractmethod
    def _named(self, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """The module's full (gathered) tensors by parameter name on the CPU, in `dtype` (rank 0's are complete):
        the fp32 masters where the module holds their bf16 rounding and `dtype` is not bf16."""

    def named_parameters_for_sync(self, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """Full weights by Hugging Face name, in `dtype`, for actor_infer (rank 0's are complete); under LoRA the
        adapters merged in, in fp32 from their masters. Collective when world_size > 1."""
        if self.lora is None:
            return self._named(dtype)
        from rlvr.backends.lora import merged_weights

        merged = merged_weights(self._named(torch.float32), self.lora.scale)
        return {k: v.to(dtype) for k, v in merged.items()}

    @abc.abstractmethod
    def save(self, directory: str) -> None:
        """Model, optimizer and schedule, for `load` to continue exactly."""

    @abc.abstractmethod
    def load(self, directory: str) -> None:
        """Back to what `save` wrote."""

    # ------------------------------------------------------------------ the model and its weights
    @property
    def lora(self):
        """cfg.lora: adapters are trained, the base weights are frozen (rlvr/backends/lora.py)."""
        return self.cfg.lora

    def _load_model(self, model_path: str) -> torch.nn.Module:
        """The spec's model (fp32), with adapters when cfg.lora asks for them."""
        model = self.spec.load(model_path)
        # packed rows each attend to themselves alone (no stream^2 mask); padded rows take transformers' SDPA path,
        # in fp32 for bf16 weights on CPU (rlvr/models/segment_attention.py)
        use_segment_attention(model)
        if self.lora is not None:
            from rlvr.backends.lora import add_lora

            model = add_lora(model, self.lora, also_trained=self.spec.also_trained)
        return model

    def _policy_module(self) -> torch.nn.Module:
        """The model itself (not an engine around it)."""
        return self.model

    @property
    def trained_names(self) -> list[str]:
        """The parameters the optimizer updates (every one without LoRA)."""
        return [name for name, p in self._policy_module().named_parameters() if p.requires_grad]

    def _write_weights(self, named: dict[str, torch.Tensor], config, directory: Path) -> None:
        """A checkpoint's weights from the model's fp32 named tensors: <dir>/model, the spec's export of every
        weight; under LoRA <dir>/adapter, the trained tensors only (the frozen base is the run's model.path)."""
        if self.lora is None:
            self.spec.export(named, config, directory / "model")
            return
        from rlvr.backends.lora import ADAPTER_DIR, save_adapter

        save_adapter(named, self.trained_names, self._policy_module(), directory / ADAPTER_DIR)

    def _read_weights(self, directory: Path) -> dict[str, torch.Tensor]:
        """What `_write_weights` wrote, by parameter name: every weight, or (LoRA) the trained ones."""
        from rlvr.backends.lora import ADAPTER_DIR, load_adapter

        if self.lora is None:
            if not (directory / "model").is_dir() and (directory / ADAPTER_DIR).is_dir():
                raise FileNotFoundError(f"{directory}: LoRA adapters ({ADAPTER_DIR}/), no full weights (model/): "
                                        "resume it with the lora settings of the run that saved it")
            return self.spec.load(str(directory / "model")).state_dict()
        return load_adapter(directory / ADAPTER_DIR, self.trained_names)

    @torch.no_grad()
    def reference_logprobs(self, batch: TrainBatch, temperature: float = 1.0) -> torch.Tensor:
        """Under LoRA the reference policy is the base model, i.e. this one with its adapters off: loss-position
        logprobs as `forward_logprobs(loss_positions_only=True)` computes them."""
        from rlvr.backends.lora import adapters_disabled

        if self.lora is None:
            raise RuntimeError("reference_logprobs is the LoRA reference; without LoRA the reference is its own worker")
        with adapters_disabled(self._policy_module()):
            return self.forward_logprobs(batch, temperature, loss_positions_only=True)

    # ------------------------------------------------------------------ rows and micro-batches
    @property
    def packs(self) -> bool:
        """Micro-batches by token budget, each run as one packed stream (cfg.max_tokens_per_micro_batch)."""
        return self.cfg.max_tokens_per_micro_batch is not None

    def _shard(self, batch: TrainBatch) -> list[tuple[TrainBatch, torch.Tensor | None]]:
        """This rank's micro-batches of `batch` (rows rank::W), each with the positions of its rows among this
        rank's rows: `micro_batch_size` rows grouped by length, or (packing) rows in bins of at most
        `max_tokens_per_micro_batch` tokens with similar totals. Padded with (dummy, None) entries so that every
        rank runs the same count (their backward passes meet in collectives)."""
        n, w = len(batch), self.world_size
        rows = torch.arange(self.rank, n, w)
        lengths = batch["attention_mask"][rows].sum(dim=1)
        if self.packs:  # a unit of rows that share a prompt stays in one micro-batch: it is packed as one
            row_lengths, prefixes, units = self._units(batch.select(rows))
            costs = [unit_tokens(u, row_lengths, prefixes) for u in units]
            bins = [torch.tensor(sorted(b for u in group for b in units[u]), dtype=torch.long)
                    for group in balanced_bins(costs, self.cfg.max_tokens_per_micro_batch)]
            n_micro = len(bins)
            if w > 1:  # the most any rank has
                count = torch.tensor([n_micro], device=self.device)
                torch.distributed.all_reduce(count, op=torch.distributed.ReduceOp.MAX)
                n_micro = int(count)
        else:
            mbs = self.cfg.micro_batch_size
            by_length = torch.argsort(lengths, stable=True)
            bins = [by_length[i : i + mbs] for i in range(0, len(rows), mbs)]
            n_micro = math.ceil(math.ceil(n / w) / mbs)
        micros: list[tuple[TrainBatch, torch.Tensor | None]] = [
            (batch.select(rows[b]).trimmed(), b) for b in bins]
        if len(micros) < n_micro:
            dummy = batch.select(slice(0, 1))
            zeroed = {k: torch.zeros_like(dummy[k]) for k in ("loss_mask", "advantages") if k in dummy.tensors}
            micros += [(TrainBatch({**dummy.tensors, **zeroed}).trimmed(), None)] * (n_micro - len(micros))
        return micros

    # ------------------------------------------------------------------ forward
    @torch.no_grad()
    def forward_logprobs(self, batch: TrainBatch, temperature: float = 1.0, *, autocast: bool = True,
                         loss_positions_only: bool = False) -> torch.Tensor:
        """[B, T-1] logprobs of each target token, padded back to the batch width with 0. loss_positions_only:
        only where batch["loss_mask"] is 1 (0 elsewhere), skipping the logits of prompt positions; what the
        reference and old-policy logprobs of the loss need. Collective when world_size > 1."""
        def logprobs(logits: torch.Tensor, micro: TrainBatch, start: int) -> torch.Tensor:
            return token_logprobs(logits, micro["input_ids"][:, 1 + start :].to(self.device), temperature)

        return self.forward_columns(batch, logprobs, autocast=autocast, loss_positions_only=loss_positions_only)

    @torch.no_grad()
    def forward_columns(self, batch: TrainBatch, head: Callable[[torch.Tensor, TrainBatch, int], torch.Tensor], *,
                        autocast: bool = True, loss_positions_only: bool = False) -> torch.Tensor:
        """[B, T-1]: `head(model output, micro-batch, start)` of every row's target columns, padded back to the
        batch width with 0 (loss_positions_only: 0 outside the loss mask, and no model output for the columns
        before a micro-batch's first loss column). Collective when world_size > 1: every rank computes its rows,
        the rows are all-gathered, every rank returns the whole."""
        self._set_train_mode(False)
        local = self._local_rows(batch)
        for micro, positions in self._shard(batch):
            start = micro.first_loss_column() if loss_positions_only else 0
            out = self._forward(micro, train=False, autocast=autocast, start=start)
            if positions is None:
                continue
            cols = head(out, micro, start)
            local[positions, start : start + cols.shape[1]] = cols.float().cpu()
        return self._all_rows(local, batch, loss_positions_only=loss_positions_only)

    def _local_rows(self, batch: TrainBatch) -> torch.Tensor:
        """Zeros for this rank's rows (r::world_size) of the batch's [B, T-1] target columns."""
        b, width = batch["input_ids"].shape[0], batch["input_ids"].shape[1] - 1
        return torch.zeros(math.ceil(b / self.world_size), width)

    def _all_rows(self, local: torch.Tensor, batch: TrainBatch, *, loss_positions_only: bool) -> torch.Tensor:
        """The batch's rows from each rank's `local` rows (rank r holds rows r::world_size), 0 outside the loss
        mask when `loss_positions_only`. Collective when world_size > 1."""
        if loss_positions_only:
            mask = batch["loss_mask"][self.rank :: self.world_size]
            local[: len(mask)] *= mask
        b = batch["input_ids"].shape[0]
        if self.world_size == 1:
            return local[:b]
        gathered = [torch.zeros_like(local, device=self.device) for _ in range(self.world_size)]
        torch.distributed.all_gather(gathered, local.to(self.device))
        out = torch.zeros(b, *local.shape[1:])
        for r, part in enumerate(gathered):
            out[r :: self.world_size] = part[: len(range(r, b, self.world_size))].cpu()
        return out

    # ------------------------------------------------------------------ training
    def train_step(self, batch: TrainBatch, loss_fn: LossFn, *, temperature: float = 1.0,
                   need_entropy_grad: bool = False, step_lr: bool = True,
                   record: list[torch.Tensor] | None = None) -> dict[str, float]:
        """The policy's update: `update` with logprobs and entropies of the sampled tokens from the logits.
        `record`: each micro-batch's logprobs, detached, appended in the order of the micro-batches."""
        def micro_loss(logits: torch.Tensor, micro: TrainBatch, n_tokens: torch.Tensor, n_seqs: torch.Tensor):
            start = micro["input_ids"].shape[1] - 1 - logits.shape[1]
            logp, entropy = token_logprobs_and_entropy(logits, micro["input_ids"][:, 1 + start :], temperature)
            if record is not None:
                record.append(logp.detach())
            if not need_entropy_grad:  # a metric only: no backward pass through it
                entropy = entropy.detach()
            return loss_fn(logp, entropy, micro, n_tokens, n_seqs)

        return self.update(batch, micro_loss, step_lr=step_lr)

    def train_step_with_logprobs(self, batch: TrainBatch, loss_fn: LossFn, **kwargs) -> tuple[dict[str, float],
                                                                                            torch.Tensor]:
        """`train_step`, and [B, T-1] logprobs of the loss tokens (0 elsewhere) from the update's own forward: with
        one optimizer step over the whole batch, the trainer's logprobs before it, as `forward_logprobs` would
        give them without a pass of their own. Collective when world_size > 1."""
        if self.cfg.ppo_epochs != 1 or (self.cfg.mini_batch_size or len(batch)) < len(batch):
            raise ValueError("logprobs from the update need one optimizer step over the whole batch (ppo_epochs 1, "
                             "no smaller mini_batch_size)")
        record: list[torch.Tensor] = []
        metrics = self.train_step(batch, loss_fn, record=record, **kwargs)
        local = self._local_rows(batch)
        # the update's micro-batches in its order (an update skipped for want of loss tokens recorded none)
        for logp, (micro, positions) in zip(record, self._shard(batch)):
            if positions is not None:  # the micro-batch's columns end at its trimmed width
                end = micro["input_ids"].shape[1] - 1
                local[positions, end - logp.shape[1] : end] = logp.float().cpu()
        return metrics, self._all_rows(local, batch, loss_positions_only=True)

    def update(self, batch: TrainBatch, micro_loss: MicroLossFn, *, step_lr: bool = True) -> dict[str, float]:
        """PPO epochs over mini-batches; one optimizer step per mini-batch, one LR-schedule step per call
        (step_lr=False: the caller trains one global step in several calls and ends it with `lr_step`).
        Collective when world_size > 1: every rank calls it with the same batch and returns the same metrics."""
        if not self.trainable:
            raise RuntimeError("train_step on a strategy built with trainable=False")
        self._set_train_mode(True)
        sums: dict[str, float] = {}
        grad_norm_sum = 0.0
        updates = skipped = 0
        for _ in range(self.cfg.ppo_epochs):
            for mini in batch.split(self.cfg.mini_batch_size or len(batch)):
                n_tokens, n_seqs = loss_counts(mini)
                if n_tokens == 0:  # every reward in it failed: nothing to learn (same decision on every rank)
                    skipped += 1
                    continue
                micros = self._shard(mini)
                for i, (micro, positions) in enumerate(micros):
                    dummy = positions is None
                    self._begin_micro(first=i == 0, last=i == len(micros) - 1)
                    start = micro.first_loss_column()
                    out = self._forward(micro, train=True, start=start)
                    # the loss's tensors, aligned with the output
                    loss, stats = micro_loss(out, to_device(micro.from_column(start), self.device),
                                             n_tokens.to(self.device), n_seqs.to(self.device))
                    del out
                    self._backward(loss * 0.0 if dummy else loss)
                    for k, v in stats.items():  # dummies add 0.0, so every rank has the same keys
                        sums[k] = sums.get(k, 0.0) + (0.0 if dummy else float(v))
                grad_norm_sum += self._optimizer_step()
                updates += 1
        lr = self.optimizer.param_groups[0]["lr"]  # the rate these updates used
        if step_lr:
            self.lr_step()
        if self.world_size > 1:  # each micro-batch's stats are its share of the mini-batch value: ranks add up
            sums = rdist.all_reduce_sum(sums, self.device)
        metrics = {k: v / max(updates, 1) for k, v in sums.items()}
        if updates:
            metrics["grad_norm"] = grad_norm_sum / updates
        metrics.update(updates=updates, skipped_updates=skipped, lr=lr)
        return metrics

    def lr_step(self) -> None:
        """The end of a global step for the LR schedule (once per step, however many calls trained it)."""
        self.scheduler.step()


def causal_lm_logits(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     start: int) -> torch.Tensor:
    """[B, T-1-start, V] logits predicting input_ids[:, 1+start:]. Models whose forward takes `logits_to_keep`
    (transformers' causal LMs) compute lm_head only for those positions; others compute all and are sliced."""
    width = input_ids.shape[1]
    if start and _takes_logits_to_keep(model):
        logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=width - start).logits
    else:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, start:]
    return logits[:, :-1]


def _takes_logits_to_keep(model: torch.nn.Module) -> bool:
    module = getattr(model, "module", model)  # a DeepSpeed engine forwards keywords to its module
    return _forward_takes_logits_to_keep(type(module))


@functools.cache  # once per model class, not on every micro-batch's forward
def _forward_takes_logits_to_keep(cls: type) -> bool:
    return "logits_to_keep" in inspect.signature(cls.forward).parameters


def causal_lm_packed_logits(model: torch.nn.Module, input_ids: torch.Tensor, position_ids: torch.Tensor,
                            keep: torch.Tensor, segments: dict) -> torch.Tensor:
    """[1, K, V] logits at stream positions `keep` of packed rows: no attention mask; each row attends to itself
    (rlvr/models/segment_attention.py, told where rows start by `segments`); lm_head only where kept."""
    return model(input_ids=input_ids, position_ids=position_ids, use_cache=False, logits_to_keep=keep,
                 **segments).logits


def load_causal_lm(path: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)


def export_causal_lm(weights: dict[str, torch.Tensor], config, path: Path) -> None:
    """A plain HF model directory (config + safetensors) from full fp32 weights."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(path)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(path / "model.safetensors"),
              metadata={"format": "pt"})


CAUSAL_LM = ModelSpec(load=load_causal_lm, forward=causal_lm_logits, export=export_causal_lm,
                      forward_packed=causal_lm_packed_logits)


def adamw(params: list[torch.nn.Parameter], cfg: TrainerConfig) -> torch.optim.AdamW:
    """The strategies' AdamW, fused (one multi-threaded kernel over each tensor) where torch has the fused kernel
    for the parameters' device: for the default model's 135M fp32 masters on a 2-core EPYC 0.06 s a step against
    0.44 s for torch's default per-tensor loop on CPU, the same update within fp32 rounding
    (bench/optimizer_step.py)."""
    fused = bool(params) and all(p.device.type in ("cpu", "cuda") and p.dtype == torch.float32 for p in params)
    return torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay,
                             fused=fused or None)


def lr_lambda(schedule: str, warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """Linear warmup, then constant or cosine decay to 0 at total_steps."""

    def f(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        if schedule == "cosine":
            progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return 1.0

    return f


def to_device(batch: TrainBatch, device: torch.device) -> TrainBatch:
    return TrainBatch({k: v.to(device) for k, v in batch.tensors.items()})


def rng_states() -> dict:
    states = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


__all__ = ["CAUSAL_LM", "LossFn", "MicroLossFn", "ModelSpec", "TrainStrategy", "adamw", "causal_lm_logits",
           "lr_lambda", "rng_states", "set_rng_states", "to_device"]
