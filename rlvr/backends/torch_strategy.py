"""Training strategy on plain torch: one process, AdamW, gradient accumulation, bf16 autocast; for the smallest
setups (the deepspeed strategy is the data-parallel one).

Device-agnostic: CUDA when present, CPU otherwise. The update loop and its normalisation by the *global* token
(and sequence) count of each mini-batch are shared with the deepspeed strategy (rlvr/backends/train_strategy.py).
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path

import torch

from rlvr.backends.train_strategy import (CAUSAL_LM, LossFn, ModelSpec, TrainStrategy, lr_lambda, rng_states,
                                          set_rng_states)
from rlvr.config.trainer import TrainerConfig
from rlvr.data.batch import TrainBatch


class TorchStrategy(TrainStrategy):
    def __init__(self, model_path: str, cfg: TrainerConfig, *, total_steps: int, seed: int,
                 trainable: bool = True, spec: ModelSpec = CAUSAL_LM):
        # Ray sets OMP_NUM_THREADS=1 in actors that reserve no CPU; the compute phases take turns, so each
        # worker may use every core unless the config says otherwise.
        torch.set_num_threads(cfg.torch_threads or os.cpu_count() or 1)
        torch.manual_seed(seed)
        self.cfg, self.spec = cfg, spec
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = spec.load(model_path).to(self.device)
        self.trainable = trainable
        if not trainable:
            self.model.eval().requires_grad_(False)
            return
        if cfg.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.model.config.use_cache = False
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, betas=cfg.betas,
                                           weight_decay=cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(cfg.lr_schedule, cfg.warmup_steps, total_steps))

    def _autocast(self, enabled: bool = True):
        if not (enabled and self.cfg.bf16_autocast):
            return nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    # ------------------------------------------------------------------ TrainStrategy hooks
    def _set_train_mode(self, train: bool) -> None:
        self.model.train(train)

    def _forward(self, micro: TrainBatch, *, train: bool, autocast: bool = True, start: int = 0) -> torch.Tensor:
        with self._autocast(autocast):
            return self.spec.forward(self.model, micro["input_ids"].to(self.device),
                                     micro["attention_mask"].to(self.device), start)

    def _begin_micro(self, first: bool, last: bool) -> None:
        if first:
            self.optimizer.zero_grad(set_to_none=True)

    def _backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def _optimizer_step(self) -> float:
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm or float("inf"))
        self.optimizer.step()
        return float(grad_norm)

    def named_parameters_for_sync(self, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        return {name: p.detach().to("cpu", dtype) for name, p in self.model.named_parameters()}

    # ------------------------------------------------------------------ checkpoints
    def save(self, directory: str) -> None:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self.spec.export(self.named_parameters_for_sync(torch.float32), self.model.config, path / "model")
        torch.save({"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                    "rng": rng_states()}, path / "train_state.pt")

    def load(self, directory: str) -> None:
        path = Path(directory)
        self.model.load_state_dict(self.spec.load(str(path / "model")).state_dict())
        state = torch.load(path / "train_state.pt", weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        set_rng_states(state["rng"])


__all__ = ["LossFn", "TorchStrategy", "lr_lambda", "rng_states", "set_rng_states"]
