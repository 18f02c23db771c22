"""When the driver waits on what. The overlap switches (docs/async_rewards.md) as one small object, so that
RLVRPipeline.run reads as the synchronous step of ../DESIGN.md and "async" is where the waits move:

    mode                  this step's rollout            the driver waits, before training    it trains on
    synchronous           started now                    its generation, then its rewards     the whole batch
    one_step_off_policy   started last step ("ahead")    the next step's generation           the whole batch
    mini_batch_pipeline   started now                    each mini-batch's rewards            each mini-batch, as
                                                                                              its rewards are in

Streaming rewards (`overlap.streaming_rewards`) is the schedulers' business: each sample's reward request leaves
as soon as it is generated, whichever mode the driver runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from rlvr.config.root import Config
from rlvr.data.types import Group
from rlvr.pipeline.rollout import Rollout


@dataclass
class StepSchedule:
    one_step_off_policy: bool = False
    mini_batch_pipeline: bool = False
    groups_per_mini_batch: int | None = None  # mini_batch_pipeline: whole groups per trained part
    ahead: Rollout | None = None  # the next step's rollout, started early (one-step off-policy)

    @classmethod
    def from_config(cls, cfg: Config) -> "StepSchedule":
        pipelined = cfg.overlap.mini_batch_pipeline
        return cls(one_step_off_policy=cfg.overlap.one_step_off_policy, mini_batch_pipeline=pipelined,
                   groups_per_mini_batch=(cfg.actor_train.mini_batch_size // cfg.rollout.group_size
                                          if pipelined else None))

    def rollout(self, step: int, max_steps: int, start: Callable[[int], Rollout],
                timed: Callable[[str, float], None]) -> Rollout:
        """This step's rollout, once the driver has waited for what the mode says (`timed(phase, seconds)`)."""
        rollout, self.ahead = self.ahead or start(step), None
        if self.one_step_off_policy and step + 1 < max_steps:
            # Colocated, as in the recipe: the next step generates now, with the weights just synced, and its
            # rewards come in while this step trains.
            self.ahead = start(step + 1)
            timed("generate_ahead", self.ahead.wait_generated())
        elif not self.mini_batch_pipeline:
            timed("generate", rollout.wait_generated())
        return rollout

    def parts(self, rollout: Rollout) -> Iterator[list[Group]]:
        """The groups the driver trains on, part by part: the whole batch in launch order (completion order is
        timing; the same seed gives the same run), or mini-batches of whole groups in completion order."""
        for groups in rollout.stream(self.groups_per_mini_batch):
            yield groups if self.mini_batch_pipeline else sorted(groups, key=lambda g: (g.domain, g.group_id))

    @property
    def lr_step_per_part(self) -> bool:
        """Each trained part steps the LR schedule; else (mini-batch pipeline) once for the whole step."""
        return not self.mini_batch_pipeline

    def cancel_ahead(self) -> None:
        if self.ahead is not None:
            self.ahead.cancel()
