"""actor_train and reference workers (Ray actors) around a training strategy."""

from __future__ import annotations

import torch

from rlvr.algorithms.actor_objective import ObjectiveSettings, actor_objective
from rlvr.backends.torch_strategy import TorchStrategy
from rlvr.config import Config
from rlvr.data.batch import TrainBatch


class _PolicyForward:
    strategy: TorchStrategy
    temperature: float

    def compute_logprobs(self, batch: TrainBatch) -> torch.Tensor:
        return self.strategy.forward_logprobs(batch, self.temperature)

    def sequence_logprobs(self, sequences: list[list[int]]) -> list[list[float]]:
        """Full-precision logprobs of whole sequences (position 0 has none: 0.0), for the weight-sync check."""
        width = max(len(s) for s in sequences)
        ids = torch.zeros((len(sequences), width), dtype=torch.long)
        att = torch.zeros_like(ids)
        for i, s in enumerate(sequences):
            ids[i, : len(s)] = torch.tensor(s)
            att[i, : len(s)] = 1
        lp = self.strategy.forward_logprobs(TrainBatch({"input_ids": ids, "attention_mask": att}), 1.0,
                                            autocast=False)
        return [[0.0] + lp[i, : len(s) - 1].tolist() for i, s in enumerate(sequences)]


class ActorTrainWorker(_PolicyForward):
    def __init__(self, cfg: Config, model_path: str, rank: int = 0):
        self.cfg = cfg
        self.temperature = cfg.generation.temperature or 1.0
        self.strategy = TorchStrategy(model_path, cfg.actor_train, total_steps=cfg.run.max_steps,
                                      seed=cfg.run.seed + rank)
        algo = cfg.algorithm
        self.settings = ObjectiveSettings(
            clip_eps_low=algo.clip_eps_low, clip_eps_high=algo.clip_eps_high, dual_clip_c=algo.dual_clip_c,
            loss_agg_mode=algo.loss_agg_mode, kl_loss_coef=algo.kl_loss_coef, kl_estimator=algo.kl_estimator,
            entropy_coef=algo.entropy_coef, max_response_len=cfg.generation.max_new_tokens)
        self.infer_dtype = getattr(torch, cfg.generation.dtype)

    def train(self, batch: TrainBatch) -> dict[str, float]:
        def loss_fn(logp, entropy, micro, n_tokens, n_seqs):
            return actor_objective(logp, entropy, micro.tensors, self.settings, n_tokens, n_seqs)

        metrics = self.strategy.train_step(batch, loss_fn, temperature=self.temperature,
                                           need_entropy_grad=self.settings.entropy_coef != 0)
        return {f"actor/{k}": v for k, v in metrics.items()}

    def weights_for_sync(self) -> dict[str, torch.Tensor]:
        return self.strategy.named_parameters_for_sync(self.infer_dtype)

    def save(self, directory: str) -> None:
        self.strategy.save(directory)

    def load(self, directory: str) -> None:
        self.strategy.load(directory)


class ReferenceWorker(_PolicyForward):
    """The frozen initial policy; started only when a KL term is configured."""

    def __init__(self, cfg: Config, model_path: str, rank: int = 0):
        self.temperature = cfg.generation.temperature or 1.0
        self.strategy = TorchStrategy(model_path, cfg.actor_train, total_steps=cfg.run.max_steps,
                                      seed=cfg.run.seed, trainable=False)
