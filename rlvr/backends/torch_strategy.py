"""Training strategy on plain torch: one process, AdamW, gradient accumulation, bf16 autocast.

Device-agnostic: CUDA when present, CPU otherwise. The loss of every micro-batch is normalised by the *global*
token (and sequence) count of its mini-batch, so accumulating over any split gives the same update.
"""

from __future__ import annotations

import math
import os
import random
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from rlvr.algorithms.policy_loss import entropy_from_logits
from rlvr.backends.logprobs import token_logprobs
from rlvr.config import ActorTrainConfig
from rlvr.data.batch import TrainBatch

LossFn = Callable[[torch.Tensor, torch.Tensor, TrainBatch, torch.Tensor, torch.Tensor],
                  tuple[torch.Tensor, dict[str, torch.Tensor]]]


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


class TorchStrategy:
    def __init__(self, model_path: str, cfg: ActorTrainConfig, *, total_steps: int, seed: int,
                 trainable: bool = True):
        # Ray sets OMP_NUM_THREADS=1 in actors that reserve no CPU; the compute phases take turns, so each
        # worker may use every core unless the config says otherwise.
        torch.set_num_threads(cfg.torch_threads or os.cpu_count() or 1)
        torch.manual_seed(seed)
        self.cfg = cfg
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(self.device)
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

    def _forward(self, micro: TrainBatch, temperature: float, autocast: bool = True
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        ids = micro["input_ids"].to(self.device)
        with self._autocast(autocast):
            logits = self.model(input_ids=ids, attention_mask=micro["attention_mask"].to(self.device)).logits
        logits = logits[:, :-1]
        return token_logprobs(logits, ids[:, 1:], temperature), logits

    @torch.no_grad()
    def forward_logprobs(self, batch: TrainBatch, temperature: float = 1.0, *, autocast: bool = True) -> torch.Tensor:
        """[B, T-1] logprobs of each target token, micro-batched, padded back to the batch width with 0."""
        self.model.eval()
        out = torch.zeros(batch["input_ids"].shape[0], batch["input_ids"].shape[1] - 1)
        row = 0
        for micro in batch.split(self.cfg.micro_batch_size):
            micro = micro.trimmed()
            lp, _ = self._forward(micro, temperature, autocast)
            out[row : row + len(micro), : lp.shape[1]] = lp.float().cpu()
            row += len(micro)
        return out

    def train_step(self, batch: TrainBatch, loss_fn: LossFn, *, temperature: float = 1.0,
                   need_entropy_grad: bool = False) -> dict[str, float]:
        """PPO epochs over mini-batches; one optimizer step per mini-batch, one LR-schedule step per call."""
        self.model.train()
        sums: dict[str, float] = {}
        updates = skipped = 0
        mini_size = self.cfg.mini_batch_size or len(batch)
        for _ in range(self.cfg.ppo_epochs):
            for mini in batch.split(mini_size):
                mask = mini["loss_mask"]
                n_tokens = mask.sum()
                n_seqs = (mask.sum(dim=1) > 0).sum()
                if n_tokens == 0:  # every reward in it failed: nothing to learn, and dividing by 0 would be NaN
                    skipped += 1
                    continue
                self.optimizer.zero_grad(set_to_none=True)
                for micro in mini.split(self.cfg.micro_batch_size):
                    micro = micro.trimmed()
                    logp, logits = self._forward(micro, temperature)
                    if need_entropy_grad:
                        entropy = entropy_from_logits(logits.float() / temperature)
                    else:
                        with torch.no_grad():
                            entropy = entropy_from_logits(logits.detach().float() / temperature)
                    del logits
                    loss, stats = loss_fn(logp, entropy, _to(micro, self.device), n_tokens.to(self.device),
                                          n_seqs.to(self.device))
                    loss.backward()
                    for k, v in stats.items():
                        sums[k] = sums.get(k, 0.0) + float(v)
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    self.model.parameters(), self.cfg.max_grad_norm or float("inf"))
                self.optimizer.step()
                sums["grad_norm"] = sums.get("grad_norm", 0.0) + float(grad_norm)
                updates += 1
        self.scheduler.step()
        metrics = {k: v / max(updates, 1) for k, v in sums.items()}
        metrics.update(updates=updates, skipped_updates=skipped, lr=self.optimizer.param_groups[0]["lr"])
        return metrics

    def named_parameters_for_sync(self, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        return {name: p.detach().to("cpu", dtype) for name, p in self.model.named_parameters()}

    # ------------------------------------------------------------------ checkpoints
    def save(self, directory: str) -> None:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path / "model", safe_serialization=True)
        torch.save({"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                    "rng": rng_states()}, path / "train_state.pt")

    def load(self, directory: str) -> None:
        path = Path(directory)
        loaded = AutoModelForCausalLM.from_pretrained(path / "model", dtype=torch.float32)
        self.model.load_state_dict(loaded.state_dict())
        state = torch.load(path / "train_state.pt", weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        set_rng_states(state["rng"])


def _to(batch: TrainBatch, device: torch.device) -> TrainBatch:
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


__all__ = ["TorchStrategy", "lr_lambda", "rng_states", "set_rng_states"]
