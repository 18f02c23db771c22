"""One multi-turn episode per trajectory: the policy (through actor_infer) and an environment take turns.

`EpisodeRunner.run_group` is what an env domain's DynamicSamplingScheduler calls instead of "generate n responses,
then score them": n episodes of the same task and seed (GiGPO's task group) played concurrently, each by
`run_episode` (AReaL's `arun_episode` shape). What comes back is an ordinary Group of Samples, so quotas, filters,
carry-over, admission control and the async modes treat env domains like any other.

Per episode:
  reset(task, seed) -> first observation -> first prompt (chat template)
  repeat: generate one turn (n=1, the sequence so far as prompt, so each turn's prompt extends the last and
          vLLM's prefix cache serves it) -> env.step(reply) -> append the reply (in the loss) and the observation
          (not in the loss) -> until done, max_turns, or the token budget
  the Sample: response_ids = every token after the first prompt, turn_index = turn of each policy token (-1 on
  observation tokens), logprobs = behaviour logprobs of the policy tokens (0.0 on observation tokens),
  reward = RewardResult(episode return, correct = success), episode = per-turn state keys and rewards.

Limits and failures (status masks the sample out of the loss and is counted under <domain>/reward/status/...):
  env raises -> error; reset/step past step_timeout_s -> timeout; wrong types -> invalid. A plain-def env runs in
  a thread: one that hangs past its deadline is abandoned (its thread cannot be stopped) and counted; async envs
  are cancelled. An episode whose next observation would not fit in max_total_tokens ends, status ok, with
  finish reason "token_budget"; the last turn's reward still counts.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable

from rlvr.config.domains import EnvConfig
from rlvr.data.reward_result import RewardResult
from rlvr.data.types import Episode, Generation, Group, Prompt, Sample, SamplingParams
from rlvr.envs.base import Env, EnvOutputError, checked_observation, checked_step, resolve_env_class
from rlvr.rollout.chat import TurnCodec

log = logging.getLogger(__name__)

# The one-turn generate call an episode makes: (prompt ids, sampling, request id) -> one Generation.
TurnGenerator = Callable[[list[int], SamplingParams, str], Awaitable[Generation]]


@dataclass(frozen=True)
class EpisodeLimits:
    max_turns: int
    max_tokens_per_turn: int | None
    max_total_tokens: int
    step_timeout_s: float

    @classmethod
    def from_config(cls, cfg: EnvConfig) -> "EpisodeLimits":
        return cls(cfg.max_turns, cfg.max_tokens_per_turn, cfg.max_total_tokens, cfg.step_timeout_s)


class EnvFailure(Exception):
    def __init__(self, status: str, info: str):
        super().__init__(info)
        self.status, self.info = status, info


@dataclass
class _Trace:
    """An episode as it grows."""

    prompt: Prompt
    prompt_ids: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    turn_index: list[int] = field(default_factory=list)
    logprobs: list[float] | None = field(default_factory=list)
    transcript: list[str] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    episode: Episode = field(default_factory=Episode)

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.ids)

    def add(self, ids: list[int], turn: int, logprobs: list[float] | None) -> None:
        self.ids.extend(ids)
        self.turn_index.extend([turn] * len(ids))
        if self.logprobs is not None and (logprobs is not None or turn < 0):
            self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))
        else:
            self.logprobs = None  # a turn without behaviour logprobs: the sample has none


class EpisodeRunner:
    """Plays one env domain's episodes; lives in the domain's scheduler actor (pickled there from the driver)."""

    def __init__(self, domain: str, cfg: EnvConfig, tokenizer: Any, default_turn_tokens: int):
        self.domain = domain
        self.cfg = cfg
        self.env_cls = resolve_env_class(domain, cfg)
        self.codec = TurnCodec(tokenizer)
        self.limits = EpisodeLimits.from_config(cfg)
        self.turn_tokens = cfg.max_tokens_per_turn or default_turn_tokens
        self.fallback_ids = [tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0]
        self._pool: ThreadPoolExecutor | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_pool": None}  # threads do not travel; made again on first use

    # ------------------------------------------------------------------ a task group
    async def run_group(self, worker: Any, prompt: Prompt, n: int, sampling: SamplingParams, version: int,
                        request_id: str, phase: dict | None = None) -> Group:
        """n episodes of `prompt`'s task and seed, on one actor_infer worker (its prefix cache holds the
        shared first prompt). Live request ids are kept in phase["live_requests"] so that the scheduler can
        abort them; an aborted turn cancels the whole group."""
        live: set[str] = phase.setdefault("live_requests", set()) if phase is not None else set()

        async def generate(ids: list[int], params: SamplingParams, rid: str) -> Generation:
            live.add(rid)
            try:
                gens = await worker.generate.remote(ids, 1, params, rid)
            finally:
                live.discard(rid)
            if gens[0].finish_reason == "abort":
                raise asyncio.CancelledError  # aborted by the scheduler, which has already counted it
            return gens[0]

        samples = await asyncio.gather(*(self.run_episode(prompt, i, generate, sampling, version, request_id)
                                         for i in range(n)))
        return Group(request_id, prompt, list(samples))

    # ------------------------------------------------------------------ one episode
    async def run_episode(self, prompt: Prompt, index: int, generate: TurnGenerator, sampling: SamplingParams,
                          version: int, group_id: str) -> Sample:
        """Episode `index` of the task group `group_id`; never raises but for cancellation."""
        trace = _Trace(prompt)
        env: Env | None = None
        try:
            env = self.env_cls(**self.cfg.args)
            status, info = await self._play(env, trace, generate, sampling, f"{group_id}:e{index}")
        except EnvFailure as failure:
            status, info = failure.status, failure.info
            trace.episode.finish = f"env_{status}"
        except EnvOutputError as err:  # reset/step returned the wrong types
            status, info = "invalid", str(err)[:300]
            trace.episode.finish = "env_invalid"
        except asyncio.CancelledError:
            raise
        except Exception as err:  # the env's constructor or state_key raised
            status, info = "error", f"{type(err).__name__}: {err}"[:300]
            trace.episode.finish = "env_error"
        finally:
            if env is not None:
                await self._close(env)
        return self._sample(trace, index, group_id, version, status, info)

    async def _play(self, env: Env, trace: _Trace, generate: TurnGenerator, sampling: SamplingParams,
                    request_id: str) -> tuple[str, str]:
        ep, limits = trace.episode, self.limits
        task, seed = trace.prompt.meta.get("task", {}), int(trace.prompt.meta.get("seed", 0))
        observation = checked_observation(await self._env_call(env.reset, ep, task, seed), "reset")
        messages, trace.prompt_ids = self.codec.first_prompt(observation, env.system_prompt)
        trace.prompt = replace(trace.prompt, messages=messages, prompt_ids=trace.prompt_ids)
        if trace.length >= limits.max_total_tokens:
            ep.finish = "token_budget"
            return "invalid", (f"the first prompt has {trace.length} tokens; env.max_total_tokens is "
                               f"{limits.max_total_tokens}")
        for turn in range(limits.max_turns):
            key = env.state_key(observation)
            budget = min(self.turn_tokens, limits.max_total_tokens - trace.length)
            gen = await generate(trace.prompt_ids + trace.ids, replace(sampling, max_new_tokens=budget),
                                 f"{request_id}:t{turn}")
            trace.add(list(gen.token_ids), turn, gen.logprobs)
            trace.versions.append(gen.policy_version)
            trace.transcript.append(f"[turn {turn}] {gen.text}")
            ep.state_keys.append(key)  # before the step: every turn in turn_index has its state, failed or not
            observation, reward, done, info = checked_step(await self._env_call(env.step, ep, gen.text))
            ep.rewards.append(reward)
            ep.invalid_actions += bool(info.get("invalid_action", False))
            trace.transcript.append(f"[observation] {observation}")
            if done:
                ep.success = bool(info.get("success", reward > 0))
                ep.finish = "done"
                break
            if turn == limits.max_turns - 1:
                ep.finish = "max_turns"
                break
            obs_ids = self.codec.observation_ids(observation, list(gen.token_ids))
            if trace.length + len(obs_ids) >= limits.max_total_tokens:  # no room left for another turn
                ep.finish = "token_budget"
                break
            trace.add(obs_ids, -1, None)
        return "ok", ep.finish

    async def _env_call(self, fn: Callable, ep: Episode, *args: Any) -> Any:
        """reset/step under the per-call deadline; failures become EnvFailure with the episode's status."""
        name = getattr(fn, "__name__", "env call")
        start = time.perf_counter()
        try:
            if inspect.iscoroutinefunction(fn):
                call = fn(*args)
            else:
                call = asyncio.get_running_loop().run_in_executor(self._threads(), functools.partial(fn, *args))
            return await asyncio.wait_for(call, self.limits.step_timeout_s)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            raise EnvFailure("timeout", f"{name} took longer than {self.limits.step_timeout_s}s") from None
        except Exception as err:
            raise EnvFailure("error", f"{name} raised {type(err).__name__}: {err}"[:300]) from None
        finally:
            ep.env_time_s += time.perf_counter() - start

    async def _close(self, env: Env) -> None:
        try:
            result = env.close()
            if inspect.isawaitable(result):
                await asyncio.wait_for(result, self.limits.step_timeout_s)
        except Exception as err:  # a failing close must not lose the episode
            log.warning("%s: env close failed: %s", self.domain, err)

    def _threads(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.cfg.max_env_threads, thread_name_prefix=f"env-{self.domain}")
        return self._pool

    def _sample(self, trace: _Trace, index: int, group_id: str, version: int, status: str, info: str) -> Sample:
        ep = trace.episode
        if status == "ok":
            reward = RewardResult(reward=float(sum(ep.rewards)), correct=ep.success, info=info,
                                  parts={"turns": float(ep.turns), "invalid_actions": float(ep.invalid_actions)})
        else:
            reward = RewardResult.failed(status, info)
        prompt = trace.prompt if trace.prompt_ids else replace(trace.prompt, prompt_ids=self.fallback_ids)
        versions = [v for v in trace.versions if v is not None]
        return Sample(prompt=prompt, group_id=group_id, index=index, response_ids=trace.ids,
                      response_text="\n".join(trace.transcript), finish_reason=ep.finish,
                      policy_version=min(versions) if versions else version, logprobs=trace.logprobs,
                      reward=reward, turn_index=trace.turn_index, episode=ep)


def env_prompts(domain: str, cfg: EnvConfig, split: str, seed: int) -> list[Prompt]:
    """The env's tasks for `split` as Prompts (no tokens yet: the first observation makes the first prompt)."""
    cls = resolve_env_class(domain, cfg)
    count = cfg.train_tasks if split == "train" else cfg.val_tasks
    tasks = cls.make_tasks(split, count, seed, **cfg.args)
    source = f"{cfg.path}.make_tasks({split!r})"
    return [Prompt(uid=f"{split}:{domain}:{i}", domain=domain, ground_truth=None,
                   meta={"task": task, "seed": seed * 1_000_003 + i}, source=f"{source}[{i}]")
            for i, task in enumerate(tasks)]


__all__ = ["EpisodeRunner", "EpisodeLimits", "EnvOutputError", "env_prompts"]
