"""The driver's typed handles on its clusters: one method per worker method the driver calls, so a reader (or an
IDE) follows `actor_train.train(batch)` to ActorTrainWorker.train. Methods ending in `_async` return the refs
(the caller waits, e.g. on several clusters at once); the others wait through the cluster's waiter.
tests/unit/test_clusters.py checks that each name here is a method of its worker class.

Collective methods (trainers with world_size > 1): every rank is called, and rank 0's result is the answer."""

from __future__ import annotations

from typing import Any

import ray
import torch

from rlvr.data.batch import TrainBatch
from rlvr.runtime.resend import gather_resent
from rlvr.workers.cluster import Cluster

Refs = list[ray.ObjectRef]


class TrainerCluster(Cluster):
    """actor_train and critic: a model with an optimizer, over one process group."""

    def train(self, batch: TrainBatch, step_lr: bool = True) -> dict[str, float]:
        return self.collective("train", batch, step_lr)

    def lr_step(self) -> None:
        self.gather("lr_step")  # every rank has its own schedule

    def save_async(self, directory: str) -> Refs:
        return self.collective_async("save", directory)

    def load_async(self, directory: str) -> Refs:
        return self.collective_async("load", directory)


class ActorTrainCluster(TrainerCluster):
    """rlvr/workers/actor_train.py ActorTrainWorker."""

    def train_with_logprobs(self, batch: TrainBatch, step_lr: bool = True) -> tuple[dict[str, float], torch.Tensor]:
        return self.collective("train_with_logprobs", batch, step_lr)

    def compute_logprobs_async(self, batch: TrainBatch | ray.ObjectRef) -> Refs:
        return self.collective_async("compute_logprobs", batch)

    def reference_logprobs_async(self, batch: TrainBatch | ray.ObjectRef) -> Refs:
        """The base model's logprobs (adapters off): the reference under actor_train.lora."""
        return self.collective_async("reference_logprobs", batch)

    def sequence_logprobs_async(self, sequences: list[list[int]]) -> Refs:
        return self.collective_async("sequence_logprobs", sequences)

    def weights_for_sync_async(self) -> Refs:
        """Every rank takes part (ZeRO gathers the full weights); rank 0's ref holds them."""
        return self.call("weights_for_sync")

    def broadcast_weights_async(self, version: int, bucket_bytes: int) -> Refs:
        return self.call("broadcast_weights", version, bucket_bytes)


class CriticCluster(TrainerCluster):
    """rlvr/workers/critic.py CriticWorker."""

    def compute_values_async(self, batch: TrainBatch | ray.ObjectRef) -> Refs:
        return self.collective_async("compute_values", batch)


class ReferenceCluster(Cluster):
    """rlvr/workers/actor_train.py ReferenceWorker: the frozen initial policy."""

    def compute_logprobs_async(self, batch: TrainBatch | ray.ObjectRef) -> Refs:
        return self.collective_async("compute_logprobs", batch)


class ActorInferCluster(Cluster):
    """rlvr/workers/actor_infer.py ActorInferWorker (each worker is independent: no collectives)."""

    def sequence_logprobs_async(self, sequences: list[list[int]]) -> Refs:
        return self.call("sequence_logprobs", sequences)

    def load_weights_async(self, weights: Any, version: int) -> Refs:
        return self.call("load_weights", weights, version)

    def receive_weights_async(self, version: int) -> Refs:
        return self.call("receive_weights", version)

    def rng_states(self) -> list[torch.Tensor]:
        return self.gather("rng_state")

    def health(self, patience_s: float) -> list[dict[str, Any]]:
        """Each worker's process and state; waits for its constructor (the engine's load) as any call does, and
        for a worker that died to be back (`patience_s`: faults.resend_patience_s)."""
        return gather_resent(self.waiter, self.workers, "health", (), f"{self.name}.health", patience_s)

    def close_async(self) -> Refs:
        return self.call("close")


class RewardCluster(Cluster):
    """rlvr/workers/rewards/reward_actor.py RewardActor (the schedulers call score themselves)."""

    def close_async(self) -> Refs:
        return self.call("close")
