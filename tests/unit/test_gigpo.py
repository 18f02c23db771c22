"""GiGPO and multi-step GRPO against hand-computed numbers on synthetic trajectories with repeated states."""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithms.advantages import grpo_advantages
from rlvr.algorithms.gigpo import (EpisodeTurns, anchor_groups, discounted_returns, gigpo_turn_advantages,
                                   group_normalize, intern_state_keys, multi_step_grpo_turn_advantages,
                                   spread_turn_values)

# Task group 0: A, B, C; task group 1: D, E, and F (masked: its env failed). States are shared names, but a
# state is only compared inside its own task group ("s0" of group 1 is not "s0" of group 0).
TRAJECTORIES = [  # (task group, states, rewards per turn, valid)
    (0, ["s0", "s1"], [0.0, 1.0], True),  # A: return 1
    (0, ["s0", "s2", "s1"], [0.0, 0.0, 1.0], True),  # B: return 1
    (0, ["s0", "s2"], [0.0, 0.0], True),  # C: return 0
    (1, ["s0", "s3"], [0.0, 1.0], True),  # D: return 1
    (1, ["s0"], [0.0], True),  # E: return 0
    (1, ["s0", "s1"], [1.0, 1.0], False),  # F: masked
]


def episodes() -> EpisodeTurns:
    ids, turn_valid = intern_state_keys([t[1] for t in TRAJECTORIES])
    rewards = torch.zeros(ids.shape)
    for b, t in enumerate(TRAJECTORIES):
        rewards[b, : len(t[2])] = torch.tensor(t[2])
    return EpisodeTurns(scores=torch.tensor([sum(t[2]) for t in TRAJECTORIES]),
                        valid=torch.tensor([t[3] for t in TRAJECTORIES]),
                        group_index=torch.tensor([t[0] for t in TRAJECTORIES]),
                        turn_rewards=rewards, state_ids=ids, turn_valid=turn_valid)


def test_discounted_returns_by_hand():
    ep = episodes()
    R = discounted_returns(ep.turn_rewards, ep.turn_valid, gamma=0.5)
    assert R[0].tolist() == [0.5, 1.0, 0.0]  # A: 0 + 0.5 * 1, 1
    assert R[1].tolist() == [0.25, 0.5, 1.0]  # B
    assert R[2].tolist() == [0.0, 0.0, 0.0]
    assert R[5].tolist() == [1.5, 1.0, 0.0]  # F (validity of the episode is not this function's business)


def test_gigpo_mean_norm_by_hand():
    # gamma 0.5, omega 1, F = 1 at both levels.
    # Episode level: group 0 mean 2/3 -> A, B: +1/3, C: -2/3; group 1 mean 1/2 -> D: +1/2, E: -1/2; F: 0.
    # Anchor groups (discounted returns in brackets):
    #   group 0, s0: A 0.5, B 0.25, C 0 (mean .25) -> +.25, 0, -.25
    #            s1: A 1, B 1 (t=2)                -> 0, 0
    #            s2: B 0.5, C 0                    -> +.25, -.25
    #   group 1, s0: D 0.5, E 0                    -> +.25, -.25
    #            s3: D only (singleton)            -> 0
    adv, stats = gigpo_turn_advantages(episodes(), gamma=0.5, omega=1.0, step_norm="mean_norm", norm_by_std=False)
    third = 1 / 3
    expected = torch.tensor([
        [third + 0.25, third + 0.0, 0.0],
        [third + 0.0, third + 0.25, third + 0.0],
        [-2 * third - 0.25, -2 * third - 0.25, 0.0],
        [0.5 + 0.25, 0.5 + 0.0, 0.0],
        [-0.5 - 0.25, 0.0, 0.0],
        [0.0, 0.0, 0.0],
    ])
    torch.testing.assert_close(adv, expected)
    # 10 counted steps in 5 anchor groups (sizes 3, 2, 2, 2, 1): 9 of them share their state with another
    assert stats["anchor_steps_grouped_frac"] == pytest.approx(0.9)
    assert stats["anchor_group_size_mean"] == pytest.approx(2.0)
    assert stats["anchor_groups"] == 5


def test_gigpo_mean_std_norm_and_omega_by_hand():
    # Step level divided by the unbiased std + eps: group 0 s0: values .5, .25, 0, std .25 -> +1, 0, -1;
    # s1: equal returns -> 0; s2: .5, 0 -> std sqrt(.125) -> +-1/sqrt(2); group 1 s0: the same; s3: singleton -> 0.
    adv, _ = gigpo_turn_advantages(episodes(), gamma=0.5, omega=0.5, step_norm="mean_std_norm", norm_by_std=False)
    a_e = multi_step_grpo_turn_advantages(episodes(), norm_by_std=False)
    h = 0.5 ** 0.5
    a_s = torch.tensor([[1.0, 0.0, 0.0], [0.0, h, 0.0], [-1.0, -h, 0.0], [h, 0.0, 0.0], [-h, 0.0, 0.0],
                        [0.0, 0.0, 0.0]])
    torch.testing.assert_close(adv, a_e + 0.5 * a_s, atol=1e-5, rtol=1e-5)


def test_singleton_anchor_groups_get_no_step_advantage():
    ep = episodes()
    ep.state_ids = torch.arange(ep.state_ids.numel()).reshape(ep.state_ids.shape)  # every state unique
    adv, stats = gigpo_turn_advantages(ep, gamma=0.9, omega=3.0)
    torch.testing.assert_close(adv, multi_step_grpo_turn_advantages(ep))
    assert stats["anchor_steps_grouped_frac"] == 0.0 and stats["anchor_group_size_mean"] == 1.0


def test_multi_step_grpo_is_the_episode_advantage_on_every_taken_turn():
    ep = episodes()
    adv = multi_step_grpo_turn_advantages(ep, norm_by_std=True)
    # equal to GRPO on the groups' returns: group 0 [1, 1, 0], group 1 [1, 0] (F masked)
    g0 = grpo_advantages(torch.tensor([[1.0, 1.0, 0.0]]), torch.ones(1, 3, dtype=torch.bool))[0]
    g1 = grpo_advantages(torch.tensor([[1.0, 0.0, 1.0]]), torch.tensor([[True, True, False]]))[0]
    per_row = torch.cat([g0, g1])
    for b, t in enumerate(TRAJECTORIES):
        n = len(t[1])
        assert torch.allclose(adv[b, :n], per_row[b].expand(n))
        assert (adv[b, n:] == 0).all()
    assert (adv[5] == 0).all()
    # omega = 0 turns GiGPO into the baseline
    torch.testing.assert_close(gigpo_turn_advantages(ep, omega=0.0, norm_by_std=True)[0], adv)


def test_group_normalize_ignores_non_members_and_small_groups():
    values = torch.tensor([1.0, 3.0, 100.0, 5.0, float("nan")])
    member = torch.tensor([True, True, False, True, False])
    groups = torch.tensor([0, 0, 0, 1, 0])
    torch.testing.assert_close(group_normalize(values, member, groups, by_std=False),
                               torch.tensor([-1.0, 1.0, 0.0, 0.0, 0.0]))


def test_anchor_groups_are_per_task_group():
    ep = episodes()
    anchors = anchor_groups(ep.group_index, ep.state_ids, ep.steps)
    assert anchors[0, 0] == anchors[1, 0] == anchors[2, 0]  # s0 in group 0
    assert anchors[3, 0] == anchors[4, 0] != anchors[0, 0]  # s0 in group 1 is another anchor
    assert anchors[0, 1] == anchors[1, 2]  # s1 reached at different turns is one anchor
    assert (anchors[5] == -1).all() and anchors[0, 2] == -1  # masked episode, turn not taken


def test_spread_turn_values_onto_action_tokens():
    per_turn = torch.tensor([[1.0, 2.0], [5.0, 0.0]])
    turn_index = torch.tensor([[-1, 0, 0, -1, -1, 1, -1], [-1, -1, 0, 0, -1, -1, -1]])
    out = spread_turn_values(per_turn, turn_index)
    assert out.tolist() == [[0, 1, 1, 0, 0, 2, 0], [0, 0, 5, 5, 0, 0, 0]]
    with pytest.raises(ValueError, match="out of range"):
        spread_turn_values(per_turn[:, :1], turn_index)


def test_inputs_are_checked():
    ep = episodes()
    with pytest.raises(ValueError, match="state_ids"):
        EpisodeTurns(ep.scores, ep.valid, ep.group_index, ep.turn_rewards, ep.state_ids[:, :1], ep.turn_valid)
    with pytest.raises(ValueError, match="step_norm"):
        gigpo_turn_advantages(ep, step_norm="std")
