"""Each reward-processing option by hand, and running moments across steps and across a checkpoint."""

import json
import math

import pytest
import torch

from rlvr.algorithms.reward_processing import RunningMoments, normalise, process_advantages, process_rewards
from rlvr.config.algorithm import RewardProcessingConfig

NAN = float("nan")
# two groups (0: rows 0-3, 1: rows 4-6); row 6's reward failed
SCORES = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 4.0, NAN])
VALID = torch.tensor([True, True, True, True, True, True, False])
GROUPS = torch.tensor([0, 0, 0, 0, 1, 1, 1])


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=atol, rtol=0,
                               equal_nan=True)


def test_no_processing_leaves_the_rewards_alone():
    out, metrics = process_rewards(SCORES, VALID, GROUPS, RewardProcessingConfig())
    close(out, SCORES.tolist())
    assert metrics == {}


def test_shift_then_scale():
    out, _ = process_rewards(SCORES, VALID, GROUPS, RewardProcessingConfig(reward_shift=-0.5, reward_scale=2.0))
    close(out, [1.0, -1.0, -1.0, 1.0, 3.0, 7.0, NAN])  # (r - 0.5) * 2; the failed reward untouched


def test_group_normalisation():
    # group 0 [1,0,0,1]: mean 0.5, unbiased std 0.577350 -> +-0.866024; group 1 [2,4]: mean 3, std 1.414214
    # -> -+0.707106 (the failed reward enters no statistic)
    out, _ = process_rewards(SCORES, VALID, GROUPS, RewardProcessingConfig(norm_mean_type="group",
                                                                            norm_std_type="group"))
    close(out, [0.866024, -0.866024, -0.866024, 0.866024, -0.707106, 0.707106, NAN])
    mean_only, _ = process_rewards(SCORES, VALID, GROUPS, RewardProcessingConfig(norm_mean_type="group"))
    close(mean_only, [0.5, -0.5, -0.5, 0.5, -1.0, 1.0, NAN])


def test_batch_normalisation():
    # valid [1,0,0,1,2,4]: mean 4/3, unbiased var = (1/9+16/9+16/9+1/9+4/9+64/9)/5 = 102/45 = 2.266667, std 1.505545
    out, _ = process_rewards(SCORES, VALID, GROUPS, RewardProcessingConfig(norm_mean_type="batch",
                                                                            norm_std_type="batch"))
    close(out, [-0.221404, -0.885618, -0.885618, -0.221404, 0.442809, 1.771236, NAN])


def test_clip_and_its_fraction():
    out, metrics = process_rewards(SCORES, VALID, GROUPS, RewardProcessingConfig(reward_clip=1.5))
    close(out, [1.0, 0.0, 0.0, 1.0, 1.5, 1.5, NAN])
    assert metrics["reward/clip_frac"] == pytest.approx(2 / 6)


def test_advantage_clip_and_weight():
    adv = torch.tensor([[0.5, -3.0, 0.0], [2.5, 1.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    out, metrics = process_advantages(adv, mask, RewardProcessingConfig(advantage_clip=2.0, reward_weight=0.5))
    close(out, [[0.25, -1.0, 0.0], [1.0, 0.5, 1.0]])  # clip to [-2, 2], then x 0.5 (off-mask zeroed later)
    assert metrics["advantage/clip_frac"] == pytest.approx(2 / 4)


def test_running_moments_across_steps():
    rm = RunningMoments()
    assert rm.std == 1.0  # nothing seen yet: no scaling
    rm.update(torch.tensor([1.0, 2.0, 3.0]))  # mean 2, unbiased std 1
    assert (rm.count, rm.mean, rm.std) == (3, pytest.approx(2.0), pytest.approx(1.0))
    rm.update(torch.tensor([4.0, 5.0]))  # all of 1..5: mean 3, unbiased var 2.5
    assert (rm.count, rm.mean, rm.std) == (5, pytest.approx(3.0), pytest.approx(math.sqrt(2.5)))


def test_running_normalisation_uses_every_reward_so_far_and_survives_a_checkpoint():
    cfg = RewardProcessingConfig(norm_mean_type="running", norm_std_type="running")
    valid, groups = torch.ones(3, dtype=torch.bool), torch.zeros(3, dtype=torch.long)
    rm = RunningMoments()
    first, metrics = process_rewards(torch.tensor([1.0, 2.0, 3.0]), valid, groups, cfg, rm)
    close(first, [-0.999999, 0.0, 0.999999])  # mean 2, std 1 (eps 1e-6)
    assert metrics["reward/running_mean"] == pytest.approx(2.0)
    restored = RunningMoments()
    restored.load_state_dict(json.loads(json.dumps(rm.state_dict())))  # as driver.json stores it
    # second step [4, 5]: the moments of 1..5, mean 3, std sqrt(2.5) = 1.581139 -> (4-3)/1.581139, (5-3)/1.581139
    for moments in (rm, restored):
        second, _ = process_rewards(torch.tensor([4.0, 5.0]), valid[:2], groups[:2], cfg, moments)
        close(second, [0.632455, 1.264911])


def test_normalise_rejects_an_unknown_kind():
    with pytest.raises(ValueError, match="unknown normalisation 'median'"):
        normalise(SCORES, VALID, GROUPS, "median", "none", None)
