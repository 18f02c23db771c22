"""Environments and a scripted policy for tests about the episode machinery (named as such: not real envs).

- `SlowGridEnvForTest`: the real grid puzzle, each step delayed by `delay_s` (a slow environment).
- `FaultyEnvForTest`: raises, hangs, or returns garbage on a chosen turn, per `mode`.
- `ScriptedPolicyForTest`: stands in for actor_infer's `generate` in runner tests: replies from a script (or a
  function of the prompt), tokenised with the real tokenizer, EOS-terminated, with made-up logprobs; records
  every prompt it was given.
"""

from __future__ import annotations

import asyncio
import time

from rlvr.data.types import Generation
from rlvr.envs.base import Env
from rlvr.envs.grid_puzzle import GridPuzzleEnv


class SlowGridEnvForTest(GridPuzzleEnv):
    def __init__(self, delay_s: float = 0.2, **args):
        super().__init__(**args)
        self.delay_s = delay_s

    async def step(self, action_text):
        await asyncio.sleep(self.delay_s)
        return super().step(action_text)


class FaultyEnvForTest(Env):
    """On turn `on_turn`, per `mode`: raise | hang_thread (a plain def that sleeps past the deadline) | garbage
    (not a 4-tuple) | bad_reward (NaN); `bad_reset` returns a number as the first observation; `mixed` raises,
    returns garbage or ends with success by the reply's length modulo 3."""

    def __init__(self, mode: str = "raise", on_turn: int = 1, sleep_s: float = 3.0):
        self.mode, self.on_turn, self.sleep_s, self.turn = mode, on_turn, sleep_s, 0

    def reset(self, task, seed):
        return 42 if self.mode == "bad_reset" else "Say anything."

    def step(self, action_text):
        self.turn += 1
        if self.mode == "mixed":  # by the reply's length: some episodes of a group fail, others go on
            kind = len(action_text) % 3
            if kind == 0:
                raise RuntimeError("injected env failure")
            if kind == 1:
                return ["not", "a", "step"]
            return "ok", 1.0, True, {"success": True}
        if self.turn - 1 == self.on_turn:
            if self.mode == "raise":
                raise RuntimeError("injected env failure")
            if self.mode == "hang_thread":
                time.sleep(self.sleep_s)
            if self.mode == "garbage":
                return "obs", 1.0
            if self.mode == "bad_reward":
                return "obs", float("nan"), False, {}
        return f"turn {self.turn}", 0.5, False, {}


class HangingEnvForTest(FaultyEnvForTest):
    """An async env whose step never returns on turn `on_turn`."""

    async def step(self, action_text):
        if self.turn == self.on_turn:
            await asyncio.sleep(3600)
        return super().step(action_text)


class ScriptedPolicyForTest:
    def __init__(self, tokenizer, replies, version: int = 0):
        self.tokenizer, self.replies, self.version = tokenizer, replies, version
        self.prompts: list[list[int]] = []
        self.requests: list[str] = []
        self.calls = 0

    async def __call__(self, prompt_ids, sampling, request_id) -> Generation:
        self.prompts.append(list(prompt_ids))
        self.requests.append(request_id)
        text = self.replies(prompt_ids) if callable(self.replies) else self.replies[self.calls % len(self.replies)]
        self.calls += 1
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][: sampling.max_new_tokens]
        reason = "length"
        if len(ids) < sampling.max_new_tokens:
            ids, reason = ids + [self.tokenizer.eos_token_id], "stop"
        return Generation(ids, self.tokenizer.decode(ids, skip_special_tokens=True), reason,
                          [-0.5 - 0.01 * i for i in range(len(ids))], policy_version=self.version)

    async def generate(self, prompt_ids, n, sampling, request_id=None):
        """actor_infer's interface (through tests.helpers.fakes.LocalHandle)."""
        return [await self(prompt_ids, sampling, request_id) for _ in range(n)]
