"""DynamicSamplingScheduler on an env domain: the same quotas, filters, statuses and aborts as a reward domain,
with the episode metrics. The policy is scripted (these tests are about scheduling episodes, not generation)."""

from __future__ import annotations

import asyncio

import pytest
from transformers import AutoTokenizer

from rlvr.config.load import config_from_dict
from rlvr.rollout.episode import EpisodeRunner, env_prompts
from rlvr.schedulers.dynamic_sampling import DynamicSamplingScheduler
from tests.helpers.envs import ScriptedPolicyForTest
from tests.helpers.fakes import LocalHandle


@pytest.fixture(scope="module")
def tokenizer(default_model_dir):
    return AutoTokenizer.from_pretrained(default_model_dir)


class SlowForOnePromptForTest(ScriptedPolicyForTest):
    """Replies at once, except for requests of the prompt `slow_uid`, which wait until aborted."""

    def __init__(self, tokenizer, replies, slow_uid: str):
        super().__init__(tokenizer, replies)
        self.slow_uid, self.aborted, self.waiting = slow_uid, set(), {}

    async def generate(self, prompt_ids, n, sampling, request_id=None):
        if f":{self.slow_uid}:" in request_id:
            event = self.waiting[request_id] = asyncio.Event()
            await event.wait()
            return [type(await self(prompt_ids, sampling, request_id))([], "", "abort")]
        return await super().generate(prompt_ids, n, sampling, request_id)

    async def abort(self, request_ids):
        self.aborted.update(request_ids)
        for rid in request_ids:
            if rid in self.waiting:
                self.waiting[rid].set()


def make(tokenizer, policy, env: dict, **rollout):
    cfg = config_from_dict({"data": {"train_files": []}, "domains": {"d": {"env": env}},
                            "rollout": {"group_size": 3, **rollout}, "generation": {"max_new_tokens": 16}})
    runner = EpisodeRunner("d", cfg.domains["d"].env, tokenizer, cfg.generation.max_new_tokens)
    train, val = (env_prompts("d", cfg.domains["d"].env, split, 0) for split in ("train", "val"))
    scheduler = DynamicSamplingScheduler("d", train, val, [LocalHandle(policy)], [], cfg, episodes=runner)
    scheduler._order = list(range(len(train)))
    return scheduler


def test_env_domain_groups_and_episode_metrics(tokenizer):
    policy = ScriptedPolicyForTest(tokenizer, ["left", "no idea", "up"])
    env = {"path": "rlvr.envs.grid_puzzle.GridPuzzleEnv", "max_turns": 3, "train_tasks": 8}
    groups, m = asyncio.run(make(tokenizer, policy, env).get_batch(2, 0, 0))
    assert len(groups) == 2 and all(len(g.samples) == 3 for g in groups)
    episodes = [s for g in groups for s in g.samples]
    assert m["d/reward/status/ok"] == 6 and m["d/scheduler/groups_kept"] == 2
    assert m["d/episode/turns/mean"] == pytest.approx(sum(s.episode.turns for s in episodes) / 6)
    actions = sum(s.episode.turns for s in episodes)
    assert m["d/episode/invalid_action_rate"] == pytest.approx(sum(s.episode.invalid_actions for s in episodes)
                                                               / actions)
    assert sum(m[f"d/episode/finish/{f}"] for f in ("done", "max_turns", "token_budget")) == 6
    assert m["d/episode/length/mean"] > m["d/episode/policy_tokens/mean"] > 0


def test_failing_env_is_counted_masked_dropped_and_refilled(tokenizer):
    policy = ScriptedPolicyForTest(tokenizer, ["hello"])
    env = {"path": "tests.helpers.envs.FaultyEnvForTest", "args": {"mode": "raise", "on_turn": 0},
           "max_turns": 2, "train_tasks": 10}
    scheduler = make(tokenizer, policy, env, max_refill_rounds=2)
    groups, m = asyncio.run(scheduler.get_batch(2, 0, 0))
    # every episode fails: each group has no valid sample and is dropped (min_valid=1), refilled twice, then
    # the step goes on short of its quota; nothing crashed and every failure is counted
    assert groups == [] and m["d/filter/dropped_too_few_valid"] == 6 and m["d/scheduler/quota_shortfall"] == 2
    assert m["d/scheduler/refill_exhausted"] == 2 and m["d/scheduler/reward_failures"] == 18
    assert "d/episode/turns/mean" not in m  # episode metrics describe kept groups; the drops are in filter/


def test_quota_met_aborts_the_live_requests_of_unfinished_episodes(tokenizer):
    policy = SlowForOnePromptForTest(tokenizer, ["left"], slow_uid="train:d:1")
    env = {"path": "rlvr.envs.grid_puzzle.GridPuzzleEnv", "max_turns": 2, "train_tasks": 4}
    scheduler = make(tokenizer, policy, env, oversample_frac=1.0)
    groups, m = asyncio.run(scheduler.get_batch(1, 0, 0))
    assert [g.prompt.uid for g in groups] == ["train:d:0"]
    assert m["d/scheduler/aborted"] == 1
    # each of the slow group's three episodes had its first turn in flight: all three were aborted by id
    assert policy.aborted == {f"s0:2:train:d:1:e{i}:t0" for i in range(3)}
