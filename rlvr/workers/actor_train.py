"""actor_train and reference workers (Ray actors) around a training strategy (torch or deepspeed).

Built in two phases, so that the ranks of a cluster can form one process group (Cluster(..., rendezvous=True)):
`__init__` records the rank; `setup(master_addr, master_port)`, called on every rank at once with rank 0's
address, builds the strategy. With world_size > 1 every method that touches the strategy is collective: the
driver calls it on every rank (Cluster.collective) and uses rank 0's result.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.actor_objective import ObjectiveSettings, actor_objective
from rlvr.algorithms.rollout_correction import CorrectionSettings
from rlvr.backends.dist import rendezvous_address
from rlvr.backends.train_strategy import CAUSAL_LM, ModelSpec, TrainStrategy
from rlvr.config.root import Config
from rlvr.config.trainer import TrainerConfig
from rlvr.data.batch import TrainBatch


def make_strategy(t: TrainerConfig, model_path: str, *, total_steps: int, rank: int, world_size: int,
                  master_addr: str, master_port: int, seed: int, trainable: bool = True,
                  spec: ModelSpec = CAUSAL_LM) -> TrainStrategy:
    """The strategy a trainer section (actor_train or critic) asks for, training `spec`'s model."""
    if t.strategy == "deepspeed":
        from rlvr.backends.deepspeed_strategy import DeepSpeedStrategy  # deepspeed is imported only when asked for

        return DeepSpeedStrategy(model_path, t, total_steps=total_steps, seed=seed, rank=rank,
                                 world_size=world_size, master_addr=master_addr, master_port=master_port,
                                 zero_stage=t.deepspeed.zero_stage, trainable=trainable,
                                 bf16_weights=t.uses_bf16_weights, spec=spec)
    from rlvr.backends.torch_strategy import TorchStrategy

    return TorchStrategy(model_path, t, total_steps=total_steps, seed=seed, trainable=trainable, spec=spec)


class _PolicyForward:
    strategy: TrainStrategy
    trainable = True

    def __init__(self, cfg: Config, model_path: str, rank: int = 0, world_size: int = 1):
        self.cfg, self.model_path, self.rank, self.world_size = cfg, model_path, rank, world_size
        self.temperature = cfg.generation.temperature or 1.0

    def rendezvous_address(self) -> tuple[str, int]:
        return rendezvous_address()

    def setup(self, master_addr: str, master_port: int) -> None:
        seed = self.cfg.run.seed + (self.rank if self.trainable else 0)
        self.strategy = make_strategy(self.cfg.actor_train, self.model_path, total_steps=self.cfg.run.max_steps,
                                      rank=self.rank, world_size=self.world_size, master_addr=master_addr,
                                      master_port=master_port, seed=seed, trainable=self.trainable)

    def compute_logprobs(self, batch: TrainBatch) -> torch.Tensor:
        """Reference / old-policy logprobs for the loss: at the loss positions (0 elsewhere)."""
        return self.strategy.forward_logprobs(batch, self.temperature, loss_positions_only=True)

    def reference_logprobs(self, batch: TrainBatch) -> torch.Tensor:
        """The reference policy's logprobs at the loss positions when it is this model with its adapters off
        (actor_train.lora: no reference worker, no second copy of the weights)."""
        return self.strategy.reference_logprobs(batch, self.temperature)

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
    def __init__(self, cfg: Config, model_path: str, rank: int = 0, world_size: int = 1):
        super().__init__(cfg, model_path, rank, world_size)
        algo = cfg.algorithm
        self.settings = ObjectiveSettings(
            policy_loss=algo.policy_loss, topr_positive_weight=algo.topr_positive_weight,
            topr_negative_weight=algo.topr_negative_weight, clip_eps_low=algo.clip_eps_low,
            clip_eps_high=algo.clip_eps_high, dual_clip_c=algo.dual_clip_c,
            loss_agg_mode=algo.loss_agg_mode, kl_loss_coef=algo.kl_loss_coef, kl_estimator=algo.kl_estimator,
            entropy_coef=algo.entropy_coef, max_response_len=cfg.generation.max_new_tokens,
            decoupled=algo.decoupled_loss, behaviour_weight_cap=algo.behaviour_weight_cap,
            rollout_is=CorrectionSettings.from_fields(algo.rollout_correction)
            if cfg.corrects_in_update and algo.rollout_correction.is_level else None)
        self.infer_dtype = getattr(torch, cfg.generation.dtype)

    def train(self, batch: TrainBatch, step_lr: bool = True) -> dict[str, float]:
        """One global step, or (step_lr=False, the mini-batch pipeline) a part of one: see `lr_step`."""
        metrics = self.strategy.train_step(batch, self._loss, **self._train_kwargs(step_lr))
        return {f"actor/{k}": v for k, v in metrics.items()}

    def train_with_logprobs(self, batch: TrainBatch, step_lr: bool = True) -> tuple[dict[str, float], torch.Tensor]:
        """`train`, and the trainer's logprobs of the loss tokens before it, from its own forward (one update over
        the batch): what the rollout correction's metrics need when its weights are computed in the update."""
        metrics, logp = self.strategy.train_step_with_logprobs(batch, self._loss, **self._train_kwargs(step_lr))
        return {f"actor/{k}": v for k, v in metrics.items()}, logp

    def _loss(self, logp, entropy, micro, n_tokens, n_seqs):
        return actor_objective(logp, entropy, micro.tensors, self.settings, n_tokens, n_seqs)

    def _train_kwargs(self, step_lr: bool) -> dict:
        return {"temperature": self.temperature, "need_entropy_grad": self.settings.entropy_coef != 0,
                "step_lr": step_lr}

    def lr_step(self) -> None:
        self.strategy.lr_step()

    def weights_for_sync(self) -> dict[str, torch.Tensor]:
        return self.strategy.named_parameters_for_sync(self.infer_dtype)

    # Weight sync over a collective group (rlvr/backends/weight_sync.py): rank 0 hosts the group and sends.
    def host_weight_group(self, world_size: int, backend: str, timeout_s: float) -> tuple[str, int]:
        from rlvr.backends.dist import node_ip
        from rlvr.backends.weight_sync import WeightGroup

        if getattr(self, "weight_group", None) is not None:
            self.weight_group.close()  # a new group replaces the old one (a bench re-forms it with fewer workers)
        self.weight_group = WeightGroup.host_group(world_size, backend, node_ip(), timeout_s)
        return self.weight_group.address

    def connect_weight_group(self) -> None:
        self.weight_group.connect()  # blocks until every inference rank has joined

    def broadcast_weights(self, version: int, bucket_bytes: int) -> dict[str, float]:
        """Every rank takes part (ZeRO gathers the full weights); rank 0 broadcasts them."""
        weights = self.weights_for_sync()
        if self.rank != 0:
            return {}
        return self.weight_group.send(weights, version, bucket_bytes)

    def save(self, directory: str) -> None:
        self.strategy.save(directory)

    def load(self, directory: str) -> None:
        self.strategy.load(directory)


class ReferenceWorker(_PolicyForward):
    """The frozen initial policy; started only when a KL term is configured."""

    trainable = False
