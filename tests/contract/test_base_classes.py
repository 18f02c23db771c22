"""The plug-in base classes are abstract: a subclass that forgets a method the pipeline calls fails when it is
made (TypeError naming the method), not minutes later when a worker first calls it."""

from __future__ import annotations

import pytest

from rlvr.backends.torch_strategy import TorchStrategy
from rlvr.backends.train_strategy import TrainStrategy
from rlvr.data.reward_result import RewardResult
from rlvr.envs.base import Env
from rlvr.workers.rewards.base import RewardWorker


def test_a_reward_without_score_is_refused_at_construction():
    class NoScore(RewardWorker):
        pass

    with pytest.raises(TypeError, match="score"):
        NoScore("math")

    class Scores(RewardWorker):
        def score(self, sample):
            return RewardResult(reward=1.0)

    assert Scores("math").domain == "math"


def test_an_env_without_reset_or_step_is_refused_at_construction():
    class OnlyReset(Env):
        def reset(self, task, seed):
            return "obs"

    with pytest.raises(TypeError, match="step"):
        OnlyReset()

    class Plays(OnlyReset):
        def step(self, action_text):
            return "", 1.0, True, {}

    assert Plays().reset({}, 0) == "obs"


def test_a_train_strategy_must_implement_every_hook():
    assert TrainStrategy.__abstractmethods__ == {"_set_train_mode", "_forward", "_backward", "_optimizer_step",
                                                 "_named", "save", "load"}
    assert TorchStrategy.__abstractmethods__ == frozenset()

    class Partial(TrainStrategy):
        def _forward(self, micro, *, train, autocast=True, start=0):
            raise AssertionError

    with pytest.raises(TypeError, match="_backward"):
        Partial()
