"""Training strategy on plain torch: one process, AdamW, gradient accumulation; for the smallest setups (the
deepspeed strategy is the data-parallel one).

Precision (`cfg.bf16_autocast`, `cfg.uses_bf16_weights`), as DeepSpeed's modes:
  * fp32: fp32 weights and compute.
  * autocast: fp32 weights, bf16 compute under torch.autocast (every matmul casts its fp32 weight first).
  * bf16 weights: the module is bf16, so forward and backward run in bf16 with no casts (AMX on CPUs that have
    it, tensor cores on GPUs); the optimizer updates fp32 master copies, and gradients accumulate over a
    mini-batch's micro-batches in fp32 on the masters. After each step the masters are rounded into the module,
    by dithered rounding (rlvr/backends/bf16_rounding.py: round-to-nearest freezes a module whose weights start on
    the bf16 grid at small learning rates) unless `cfg.bf16_rounding` is "nearest". Weights for actor_infer come
    from the masters unless asked for in bf16 (then the module's, which is what the trainer computed with).

Device-agnostic: CUDA when present, CPU otherwise. The update loop and its normalisation by the *global* token
(and sequence) count of each mini-batch are shared with the deepspeed strategy (rlvr/backends/train_strategy.py).
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from rlvr.backends.bf16_rounding import dither_thresholds, dithered_bf16_into
from rlvr.backends.train_strategy import (CAUSAL_LM, LossFn, ModelSpec, TrainStrategy, adamw, lr_lambda, rng_states,
                                          set_rng_states)
from rlvr.data.batch import TrainBatch

if TYPE_CHECKING:  # only torch and transformers at run time (scripts/gpu_check.py runs without pydantic)
    from rlvr.config.trainer import TrainerConfig


class TorchStrategy(TrainStrategy):
    def __init__(self, model_path: str, cfg: TrainerConfig, *, total_steps: int, seed: int,
                 trainable: bool = True, spec: ModelSpec = CAUSAL_LM, device: str | None = None):
        # Ray sets OMP_NUM_THREADS=1 in actors that reserve no CPU; the compute phases take turns, so each
        # worker may use every core unless the config says otherwise.
        torch.set_num_threads(cfg.torch_threads or os.cpu_count() or 1)
        torch.manual_seed(seed)
        self.cfg, self.spec = cfg, spec
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = self._load_model(model_path).to(self.device)
        self.bf16_weights = cfg.uses_bf16_weights
        self.trainable = trainable
        self.masters: dict[str, torch.nn.Parameter] = {}
        if self.bf16_weights and trainable:  # fp32 copies of what trains, before the module is rounded to bf16
            self.masters = {name: torch.nn.Parameter(p.detach().float().clone())
                            for name, p in self.model.named_parameters() if p.requires_grad}
        self.thresholds: dict[str, torch.Tensor] = {}
        if self.masters and cfg.bf16_rounding == "dithered":  # its own generator: the global RNG stays as seeded
            generator = torch.Generator().manual_seed(seed)
            self.thresholds = {name: dither_thresholds(m.shape, generator).to(self.device)
                               for name, m in self.masters.items()}
        if self.bf16_weights:
            self.model.to(torch.bfloat16)
            self._round_masters_into_module()
        if not trainable:
            self.model.eval().requires_grad_(False)
            return
        if cfg.gradient_checkpointing:
            # non-reentrant under LoRA: the reentrant form passes no gradient through a block whose inputs (the
            # frozen embeddings' output) do not require one
            kwargs = {"use_reentrant": False} if self.lora is not None else None
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        self.model.config.use_cache = False
        self.optimizer = adamw(self._trained_parameters(), cfg)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(cfg.lr_schedule, cfg.warmup_steps, total_steps))

    def _autocast(self, enabled: bool = True):
        # bf16 weights compute in bf16 without it; autocast=False then still means a bf16 forward
        if not (enabled and self.cfg.bf16_autocast) or self.bf16_weights:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def _trained_parameters(self) -> list[torch.nn.Parameter]:
        if self.bf16_weights:
            return list(self.masters.values())
        return [p for p in self.model.parameters() if p.requires_grad]

    # ------------------------------------------------------------------ TrainStrategy hooks
    def _set_train_mode(self, train: bool) -> None:
        self.model.train(train)

    def _forward(self, micro: TrainBatch, *, train: bool, autocast: bool = True, start: int = 0) -> torch.Tensor:
        with self._autocast(autocast):
            return self._run_spec(self.model, micro, start)

    def _begin_micro(self, first: bool, last: bool) -> None:
        if first:
            self.optimizer.zero_grad(set_to_none=True)

    def _backward(self, loss: torch.Tensor) -> None:
        loss.backward()
        if self.bf16_weights:  # this micro-batch's bf16 gradients join the mini-batch's sum in fp32
            for name, p in self.model.named_parameters():
                if p.grad is None:
                    continue
                master = self.masters[name]
                if master.grad is None:
                    master.grad = p.grad.float()
                else:
                    master.grad.add_(p.grad)
                p.grad = None

    def _optimizer_step(self) -> float:
        params = self._trained_parameters()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm or float("inf"))
        self.optimizer.step()
        self._round_masters_into_module()
        return float(grad_norm)

    def _round_masters_into_module(self) -> None:
        module = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, master in self.masters.items():
                if name in self.thresholds:
                    dithered_bf16_into(module[name], master, self.thresholds[name])
                else:
                    module[name].copy_(master)  # round to nearest bf16

    def _named(self, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """The masters are the exact weights, the module their bf16 rounding."""
        exact = dtype != torch.bfloat16
        return {name: (self.masters[name] if exact and name in self.masters else p).detach().to("cpu", dtype)
                for name, p in self.model.named_parameters()}

    # ------------------------------------------------------------------ checkpoints
    def save(self, directory: str) -> None:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self._write_weights(self._named(torch.float32), self.model.config, path)
        # The optimizer in a file of its own: a checkpoint that is no longer the newest may lose it
        # (run.keep_optimizer=last) and keep the rest
        torch.save(self.optimizer.state_dict(), path / "optimizer.pt")
        torch.save({"scheduler": self.scheduler.state_dict(), "rng": rng_states()}, path / "train_state.pt")

    def load(self, directory: str) -> None:
        path = Path(directory)
        state = torch.load(path / "train_state.pt", weights_only=False)
        if (path / "optimizer.pt").exists():
            optimizer = torch.load(path / "optimizer.pt", weights_only=False)
        elif "optimizer" in state:  # a checkpoint written before the optimizer had a file of its own
            optimizer = state["optimizer"]
        else:
            raise FileNotFoundError(f"{path}: no optimizer.pt, the optimizer state to resume from (dropped by "
                                    "run.keep_optimizer=last?)")
        state_dict = self._read_weights(path)
        with torch.no_grad():
            for name, master in self.masters.items():
                master.copy_(state_dict[name])
        # cast to the module's dtype; under LoRA the trained tensors only (the frozen base is as loaded); then the
        # trained ones rounded from their masters as every step rounds them
        self.model.load_state_dict(state_dict, strict=self.lora is None)
        self._round_masters_into_module()
        self.optimizer.load_state_dict(optimizer)
        self.scheduler.load_state_dict(state["scheduler"])
        set_rng_states(state["rng"])


__all__ = ["LossFn", "TorchStrategy", "lr_lambda", "rng_states", "set_rng_states"]
