"""The critic cluster's worker (a Ray actor): a value model (rlvr/models/value_model.py) trained by its own
strategy (torch or DeepSpeed ZeRO, `critic.world_size` ranks, its own optimizer and LR schedule), with PPO's
clipped value loss.

Built in two phases like actor_train (rlvr/workers/actor_train.py): `__init__` records the rank, `setup` joins the
process group and builds the strategy; with world_size > 1 every method is collective (Cluster.collective).
"""

from __future__ import annotations

import torch

from rlvr.algorithms.value_loss import ValueSettings, value_objective
from rlvr.backends.dist import rendezvous_address
from rlvr.backends.train_strategy import TrainStrategy
from rlvr.backends.value_spec import value_spec
from rlvr.config.root import Config
from rlvr.data.batch import TrainBatch
from rlvr.workers.actor_train import make_strategy


class CriticWorker:
    strategy: TrainStrategy

    def __init__(self, cfg: Config, model_path: str, rank: int = 0, world_size: int = 1):
        self.cfg, self.model_path, self.rank, self.world_size = cfg, model_path, rank, world_size
        self.settings = ValueSettings(cliprange_value=cfg.critic.cliprange_value,
                                      loss_agg_mode=cfg.critic.loss_agg_mode)

    def rendezvous_address(self) -> tuple[str, int]:
        return rendezvous_address()

    def setup(self, master_addr: str, master_port: int) -> None:
        # One head initialisation for every rank (run.seed); the ranks' own RNG streams differ like the actor's.
        self.strategy = make_strategy(self.cfg.critic, self.model_path, total_steps=self.cfg.run.max_steps,
                                      rank=self.rank, world_size=self.world_size, master_addr=master_addr,
                                      master_port=master_port, seed=self.cfg.run.seed + self.rank,
                                      spec=value_spec(self.cfg.run.seed))

    def compute_values(self, batch: TrainBatch) -> torch.Tensor:
        """[B, T-1] values V(s_t) at the loss positions (0 elsewhere), target-aligned like loss_mask."""
        return self.strategy.forward_columns(batch, lambda values, micro, start: values, loss_positions_only=True)

    def train(self, batch: TrainBatch, step_lr: bool = True) -> dict[str, float]:
        """One global step of the value model on batch["returns"], clipped around batch["values"]."""
        def micro_loss(values, micro, n_tokens, n_seqs):
            return value_objective(values, micro.tensors, self.settings, n_tokens, n_seqs)

        metrics = self.strategy.update(batch, micro_loss, step_lr=step_lr)
        return {f"critic/{k}": v for k, v in metrics.items()}

    def lr_step(self) -> None:
        self.strategy.lr_step()

    def save(self, directory: str) -> None:
        self.strategy.save(directory)

    def load(self, directory: str) -> None:
        self.strategy.load(directory)
