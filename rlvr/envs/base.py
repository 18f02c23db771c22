"""The environment contract (DESIGN.md, environments): what a multi-turn domain plays in.

Writing a new environment::

    from rlvr.envs.base import Env

    class GuessEnv(Env):
        system_prompt = "Guess the number between 1 and 9. Answer with one digit."

        def reset(self, task, seed):             # plain defs run in a thread; write `async def` for I/O
            self.secret = task["secret"]
            return "Your guess?"

        def step(self, action_text):
            digits = [c for c in action_text if c.isdigit()]
            if not digits:
                return "Answer with one digit.", 0.0, False, {"invalid_action": True}
            if int(digits[0]) == self.secret:
                return "Right!", 1.0, True, {"success": True}
            return "Higher." if int(digits[0]) < self.secret else "Lower.", 0.0, False, {}

        @classmethod
        def make_tasks(cls, split, count, seed, **args):
            rng = random.Random(f"{seed}:{split}")
            return [{"secret": rng.randint(1, 9)} for _ in range(count)]

and in the YAML: `domains: {guess: {env: {path: my_pkg.GuessEnv, max_turns: 4}}}`.

The episode runner (rlvr/rollout/episode.py) builds one env per trajectory with `cls(**args)`, and owns every
limit: `max_turns`, per-turn and total token budgets, a deadline on each reset/step. An env that raises, misses
its deadline or returns something other than the contract's types ends its episode with status error / timeout /
invalid: counted, masked out of the loss, never a silent 0. An action the env cannot parse is not an env failure:
the env says so in the next observation and sets `info["invalid_action"] = True` (counted per domain).

`info` keys the runner reads: `invalid_action` (bool), `success` (bool, on the last step; default: done with a
positive reward). `state_key(observation)` names the state an action is taken in, for GiGPO's anchor groups:
equal keys across the trajectories of one task group are compared step by step. The default hashes the
whitespace-normalised observation; override it when the observation carries text that does not change the state
(feedback on the last move, a turn counter).
"""

from __future__ import annotations

import abc
import hashlib
import math
import random
from typing import Any

from rlvr.config.base import ConfigError
from rlvr.config.call_args import check_call_args
from rlvr.config.domains import EnvConfig
from rlvr.config.load import import_class


class EnvOutputError(ValueError):
    """An env returned something other than the contract's types: the episode ends with status invalid."""


class Env(abc.ABC):
    # Sent as the system message in front of the first observation (None: the chat template's default).
    system_prompt: str | None = None

    def __init__(self, **args: Any) -> None:
        if args:
            raise TypeError(f"{type(self).__name__} takes no arguments, got {sorted(args)}")

    @abc.abstractmethod
    def reset(self, task: dict[str, Any], seed: int) -> str:
        """Starts an episode of `task`; returns the first observation. Same task and seed: same observation."""

    @abc.abstractmethod
    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        """Plays the policy's turn; returns (observation, reward, done, info)."""

    def state_key(self, observation: str) -> str:
        return hashlib.sha1(" ".join(observation.split()).encode()).hexdigest()[:16]

    def close(self) -> None:
        """Releases what the env holds (called once per episode, also after a failure)."""

    @classmethod
    def make_tasks(cls, split: str, count: int, seed: int, **args: Any) -> list[dict[str, Any]]:
        """`count` tasks for `split` ("train" / "val"), deterministic in `seed`, disjoint across splits. The
        default gives every task its own level seed; envs with richer tasks override it."""
        rng = random.Random(f"{seed}:{split}")
        offset = 0 if split == "train" else 1 << 30
        return [{"level": offset + rng.randrange(1 << 30)} for _ in range(count)]


def resolve_env_class(domain: str, cfg: EnvConfig) -> type[Env]:
    """Imports `cfg.path`; errors name the config key, so a typo fails before any actor starts."""
    return import_class(f"domains.{domain}.env.path", cfg.path, Env, "an Env subclass (rlvr.envs.base.Env)")


def check_args(domain: str, cls: type[Env], cfg: EnvConfig) -> None:
    """Checks the argument names and types against the constructor, then builds (and closes) one env, so that
    arguments it rejects are a config error naming the key."""
    check_call_args(cls, cfg.args, f"domains.{domain}.env.args")
    try:
        env = cls(**cfg.args)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{cfg.path} rejected them: {err}", key=f"domains.{domain}.env.args") from None
    env.close()


def checked_observation(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise EnvOutputError(f"{where} returned {type(value).__name__}, not an observation string")
    return value


def checked_step(value: Any) -> tuple[str, float, bool, dict[str, Any]]:
    """The (observation, reward, done, info) of a step, or EnvOutputError naming what is wrong."""
    if not isinstance(value, tuple) or len(value) != 4:
        raise EnvOutputError(f"step returned {type(value).__name__}"
                             f"{f' of length {len(value)}' if isinstance(value, tuple) else ''}, not "
                             f"(observation, reward, done, info)")
    observation, reward, done, info = value
    observation = checked_observation(observation, "step")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        raise EnvOutputError(f"step returned reward {reward!r}, not a finite number")
    if not isinstance(done, bool) and type(done).__name__ != "bool_":  # numpy's bool is fine too
        raise EnvOutputError(f"step returned done {done!r}, not a bool")
    if info is None:
        info = {}
    if not isinstance(info, dict):
        raise EnvOutputError(f"step returned info of type {type(info).__name__}, not a dict")
    return observation, float(reward), bool(done), info
