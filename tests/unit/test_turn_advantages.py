"""make_train_batch with env domains: per-turn GiGPO advantages on the policy's tokens only, the episode level on
reward domains, anchor statistics per domain. Samples are built by hand, numbers computed by hand."""

from __future__ import annotations

import pytest
import torch

from rlvr.config.load import config_from_dict
from rlvr.data.reward_result import RewardResult
from rlvr.data.types import Episode, Group, Prompt, Sample
from rlvr.pipeline.advantage_step import AdvantageStep
from rlvr.pipeline.batching import make_train_batch


def episode_sample(index: int, turns: list[tuple[str, float, int]], obs_len: int = 2, ok: bool = True) -> Sample:
    """turns: (state key, reward, policy tokens). Response: policy tokens of turn k (value 10+k), then obs_len
    observation tokens (value 99), ... ; prompt [1, 2]."""
    ids, turn_index = [], []
    for k, (_, _, n) in enumerate(turns):
        ids += [10 + k] * n
        turn_index += [k] * n
        if k < len(turns) - 1:
            ids += [99] * obs_len
            turn_index += [-1] * obs_len
    ep = Episode(state_keys=[t[0] for t in turns], rewards=[t[1] for t in turns], finish="done")
    total = sum(t[1] for t in turns)
    reward = RewardResult(total, correct=total > 0) if ok else RewardResult.failed("error", "env raised")
    return Sample(prompt=Prompt("u", "grid", None, prompt_ids=[1, 2]), group_id="g", index=index,
                  response_ids=ids, response_text="", finish_reason="done", policy_version=0,
                  reward=reward, turn_index=turn_index, episode=ep)


def math_sample(index: int, reward: float) -> Sample:
    return Sample(prompt=Prompt("m", "math", "1", prompt_ids=[5]), group_id="m", index=index,
                  response_ids=[7, 8], response_text="", finish_reason="stop", policy_version=0,
                  reward=RewardResult(reward, correct=reward > 0))


def grid_group() -> Group:
    # A: s0 -> s1 (reward 1 at the end); B: s0 -> s2 (nothing); C: masked (env error)
    return Group("g", Prompt("u", "grid", None), [
        episode_sample(0, [("s0", 0.0, 2), ("s1", 1.0, 1)]),
        episode_sample(1, [("s0", 0.0, 1), ("s2", 0.0, 2)]),
        episode_sample(2, [("s0", 0.0, 1)], ok=False),
    ])


def algorithm(**section) -> dict:
    return section


def train_batch(groups: dict, algo: dict):
    """The driver's order: the batch, then (after its forward passes) the advantages of each domain."""
    domains = {"grid": {"env": "rlvr.envs.grid_puzzle.GridPuzzleEnv"},
               "math": {"reward": {"worker": "rlvr.workers.rewards.math_rule.MathRuleRewardWorker"}}}
    cfg = config_from_dict({"data": {"train_files": ["t.jsonl"]}, "domains": {d: domains[d] for d in groups},
                            "rollout": {"domain_interleave_probs": {d: 1 / len(groups) for d in groups}},
                            "algorithm": algo})
    batch, samples, metrics = make_train_batch(groups, list(groups), pad_id=0, seed=0)
    batch, adv_metrics = AdvantageStep(cfg)(batch)
    return batch, samples, {**metrics, **adv_metrics}


def rows_by_index(samples, batch):
    return {(s.group_id, s.index): b for b, s in enumerate(samples)}


def test_gigpo_advantages_land_on_action_tokens_only():
    cfg = algorithm(preset="gigpo", gigpo={"gamma": 0.5, "omega": 1.0})
    math = Group("m", Prompt("m", "math", "1"), [math_sample(0, 1.0), math_sample(1, 0.0)])
    batch, samples, metrics = train_batch({"grid": [grid_group()], "math": [math]}, cfg)
    rows = rows_by_index(samples, batch)
    # Episode level (F = 1): A 1, B 0 -> +.5, -.5. Step level, gamma .5: s0 holds A (R = .5) and B (R = 0)
    # -> +.25, -.25; s1, s2 are singletons -> 0. A: turn 0 .75, turn 1 .5; B: turn 0 -.75, turn 1 -.5.
    for key, per_turn in ((("g", 0), [0.75, 0.5]), (("g", 1), [-0.75, -0.5])):
        b = rows[key]
        s = samples[b]
        adv = batch["advantages"][b, 1 : 1 + len(s.response_ids)]  # prompt of 2 tokens: response from col 1
        expected = [per_turn[t] if t >= 0 else 0.0 for t in s.turn_index]
        assert adv.tolist() == pytest.approx(expected)
        assert batch["loss_mask"][b, 1 : 1 + len(s.response_ids)].tolist() == [float(t >= 0) for t in s.turn_index]
    assert batch["loss_mask"][rows[("g", 2)]].sum() == 0 and batch["advantages"][rows[("g", 2)]].abs().sum() == 0
    # the single-turn math domain gets the episode level alone (F = 1): +.5 / -.5 on its response tokens
    assert batch["advantages"][rows[("m", 0)], :2].tolist() == [0.5, 0.5]
    assert batch["advantages"][rows[("m", 1)], :2].tolist() == [-0.5, -0.5]
    assert batch["turn_index"][rows[("m", 0)], :3].tolist() == [0, 0, -1]  # a single-turn response: turn 0
    assert (batch["state_id"][rows[("m", 0)]] == -1).all()  # ... and no episode
    # the per-turn episode data on the token grid: A's turn rewards on each turn's last token, its states on all
    a = rows[("g", 0)]
    assert batch["turn_reward"][a, 1:6].tolist() == [0.0, 0.0, 0.0, 0.0, 1.0]  # turn 0: 2 tokens, obs 2, turn 1
    assert batch["state_id"][a, 1:6].tolist()[:2] == [batch["state_id"][rows[("g", 1)], 1].item()] * 2  # s0
    # anchor statistics of the grid domain: 4 counted steps, groups s0 (2), s1 (1), s2 (1)
    assert metrics["grid/gigpo/anchor_steps_grouped_frac"] == pytest.approx(0.5)
    assert metrics["grid/gigpo/anchor_group_size_mean"] == pytest.approx(4 / 3)
    assert metrics["grid/gigpo/step_adv_abs_mean"] == pytest.approx(0.125)
    assert "math/gigpo/anchor_group_size_mean" not in metrics


def test_multi_step_grpo_and_sequence_estimators_broadcast_over_action_tokens():
    grpo = algorithm(preset="grpo", norm_adv_by_std=False)
    multi = algorithm(preset="multi_step_grpo")
    out = {}
    for name, cfg in (("grpo", grpo), ("multi", multi)):
        batch, samples, metrics = train_batch({"grid": [grid_group()]}, cfg)
        rows = rows_by_index(samples, batch)
        out[name] = {k: batch["advantages"][b] for k, b in rows.items()}
        assert metrics["grid/gigpo/anchor_group_size_mean"] == pytest.approx(4 / 3)  # logged whatever the estimator
    for key in out["grpo"]:
        torch.testing.assert_close(out["grpo"][key], out["multi"][key])  # the same: A^E on every policy token
    a = out["multi"][("g", 0)]
    assert set(a[a != 0].tolist()) == {0.5}
