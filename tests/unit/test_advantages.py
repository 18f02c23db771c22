"""Hand-computed checks of the advantage estimators. Expected numbers are worked out in the comments."""

import math

import pytest
import torch

from rlvr.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    GROUP_ESTIMATORS,
    AdvantageInputs,
    AdvantageSettings,
    broadcast_to_tokens,
    compute_advantages,
    grpo_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
)

NAN = float("nan")


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


# ---------------------------------------------------------------- GRPO / Dr.GRPO


def test_grpo_basic_unbiased_std():
    # r = [1,0,0,1]: mean 0.5, deviations ±0.5, unbiased var = 4*0.25/3 = 1/3, std = 0.577350
    # A = ±0.5 / (0.577350 + 1e-6) = ±0.866024
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    valid = torch.ones(1, 4, dtype=torch.bool)
    close(grpo_advantages(rewards, valid), [[0.866024, -0.866024, -0.866024, 0.866024]])


def test_grpo_two_groups_are_independent():
    # group 0: [1,0,0,1] as above; group 1: [2,4,6,8]: mean 5, dev [-3,-1,1,3],
    # unbiased var = (9+1+1+9)/3 = 20/3, std = 2.581989 -> A = [-1.161895, -0.387298, 0.387298, 1.161895]
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 4.0, 6.0, 8.0]])
    valid = torch.ones(2, 4, dtype=torch.bool)
    close(
        grpo_advantages(rewards, valid),
        [[0.866024, -0.866024, -0.866024, 0.866024], [-1.161895, -0.387298, 0.387298, 1.161895]],
    )


def test_grpo_invalid_excluded_from_stats_and_zero():
    # valid rewards 1,0,0 (the NaN one is invalid): mean 1/3, dev [2/3, -1/3, -1/3],
    # unbiased var = (4/9 + 1/9 + 1/9)/2 = 1/3, std = 0.577350
    # A = 0.666667/0.577351 = 1.154699 for r=1, -0.333333/0.577351 = -0.577349 for r=0, 0 for the invalid one
    rewards = torch.tensor([[1.0, 0.0, NAN, 0.0]])
    valid = torch.tensor([[True, True, False, True]])
    adv = grpo_advantages(rewards, valid)
    assert torch.isfinite(adv).all()
    close(adv, [[1.154699, -0.577349, 0.0, -0.577349]])


def test_grpo_invalid_placeholder_value_does_not_matter():
    # Same as above but the invalid sample carries a large number instead of NaN: result unchanged.
    rewards = torch.tensor([[1.0, 0.0, 100.0, 0.0]])
    valid = torch.tensor([[True, True, False, True]])
    close(grpo_advantages(rewards, valid), [[1.154699, -0.577349, 0.0, -0.577349]])


def test_grpo_single_valid_group_gets_zero():
    # Only one valid sample: no baseline, advantage 0 everywhere in that group.
    rewards = torch.tensor([[1.0, NAN, NAN], [1.0, 0.0, 1.0]])
    valid = torch.tensor([[True, False, False], [True, True, True]])
    # group 1: mean 2/3, dev [1/3,-2/3,1/3], var = (1/9+4/9+1/9)/2 = 1/3, std 0.577350
    # A = [0.577349, -1.154699, 0.577349]
    close(grpo_advantages(rewards, valid), [[0.0, 0.0, 0.0], [0.577349, -1.154699, 0.577349]])


def test_grpo_all_invalid_and_all_equal_groups_are_zero():
    rewards = torch.tensor([[NAN, NAN], [1.0, 1.0]])
    valid = torch.tensor([[False, False], [True, True]])
    close(grpo_advantages(rewards, valid), [[0.0, 0.0], [0.0, 0.0]])


def test_dr_grpo_no_std_division():
    # Dr.GRPO: A = r - mean. [1,0,0,1] -> ±0.5; invalid case: [1,0,x,0] -> mean 1/3 -> [2/3,-1/3,0,-1/3]
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 0.0, NAN, 0.0]])
    valid = torch.tensor([[True, True, True, True], [True, True, False, True]])
    close(
        grpo_advantages(rewards, valid, norm_by_std=False),
        [[0.5, -0.5, -0.5, 0.5], [0.666667, -0.333333, 0.0, -0.333333]],
    )
    close(
        GROUP_ESTIMATORS["dr_grpo"](rewards, valid),
        [[0.5, -0.5, -0.5, 0.5], [0.666667, -0.333333, 0.0, -0.333333]],
    )


def test_grpo_eps_guards_tiny_std():
    # [1, 1+1e-7]: mean 1+5e-8, dev ±5e-8, unbiased std = sqrt(2*(5e-8)^2) = 7.0711e-8 (float64)
    # A = ±5e-8 / (7.0711e-8 + 1e-6) = ±0.046698 (not ±0.7071, which it would be without eps)
    rewards = torch.tensor([[1.0, 1.0 + 1e-7]], dtype=torch.float64)
    valid = torch.ones(1, 2, dtype=torch.bool)
    close(grpo_advantages(rewards, valid), [[-0.046698, 0.046698]], atol=1e-6)


# ---------------------------------------------------------------- RLOO


def test_rloo_basic():
    # [1,0,0,1]: A_0 = 1 - (0+0+1)/3 = 2/3; A_1 = 0 - (1+0+1)/3 = -2/3
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    valid = torch.ones(1, 4, dtype=torch.bool)
    close(rloo_advantages(rewards, valid), [[0.666667, -0.666667, -0.666667, 0.666667]])


def test_rloo_invalid_single_and_pair():
    # row 0: valid [1,0,_,0]: A_0 = 1 - (0+0)/2 = 1, A_1 = 0 - (1+0)/2 = -0.5, A_3 = -0.5, invalid 0
    # row 1: one valid sample -> 0
    # row 2: two valid [3,1,_,_]: A = 3-1 = 2, 1-3 = -2
    rewards = torch.tensor([[1.0, 0.0, NAN, 0.0], [5.0, NAN, NAN, NAN], [3.0, 1.0, NAN, 7.0]])
    valid = torch.tensor(
        [[True, True, False, True], [True, False, False, False], [True, True, False, False]]
    )
    adv = rloo_advantages(rewards, valid)
    assert torch.isfinite(adv).all()
    close(adv, [[1.0, -0.5, 0.0, -0.5], [0.0, 0.0, 0.0, 0.0], [2.0, -2.0, 0.0, 0.0]])


# ---------------------------------------------------------------- REINFORCE++-baseline


def test_reinforce_pp_baseline_basic():
    # group 0 [1,0] -> centred [0.5,-0.5]; group 1 [2,0] -> [1,-1]
    # batch: mean 0, unbiased var = (0.25+0.25+1+1)/3 = 0.833333, std 0.912871
    # A = [0.5, -0.5, 1, -1] / (0.912871 + 1e-6) = [0.547722, -0.547722, 1.095444, -1.095444]
    rewards = torch.tensor([[1.0, 0.0], [2.0, 0.0]])
    valid = torch.ones(2, 2, dtype=torch.bool)
    close(reinforce_pp_baseline_advantages(rewards, valid), [[0.547722, -0.547722], [1.095444, -1.095444]])


def test_reinforce_pp_baseline_invalid_and_single_valid_excluded():
    # g0 [1,0,x]   -> centred [0.5,-0.5,0(invalid)]
    # g1 [2,0,1]   -> mean 1 -> [1,-1,0]
    # g2 [5,x,x]   -> single valid: 0, excluded from the batch statistics
    # contributing: 0.5,-0.5,1,-1,0 -> mean 0, unbiased var = 2.5/4 = 0.625, std 0.790569
    # A = 0.5/0.790570 = 0.632455, 1/0.790570 = 1.264910, 0 -> 0
    rewards = torch.tensor([[1.0, 0.0, NAN], [2.0, 0.0, 1.0], [5.0, NAN, NAN]])
    valid = torch.tensor([[True, True, False], [True, True, True], [True, False, False]])
    adv = reinforce_pp_baseline_advantages(rewards, valid)
    assert torch.isfinite(adv).all()
    close(adv, [[0.632455, -0.632455, 0.0], [1.264910, -1.264910, 0.0], [0.0, 0.0, 0.0]])


def test_reinforce_pp_baseline_nothing_to_whiten():
    rewards = torch.tensor([[1.0, NAN], [NAN, NAN]])
    valid = torch.tensor([[True, False], [False, False]])
    close(reinforce_pp_baseline_advantages(rewards, valid), [[0.0, 0.0], [0.0, 0.0]])


# ---------------------------------------------------------------- broadcast, registry, errors


def test_broadcast_to_tokens():
    seq_adv = torch.tensor([2.0, -1.0])
    mask_f = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    expected = [[2.0, 2.0, 0.0], [0.0, -1.0, -1.0]]
    close(broadcast_to_tokens(seq_adv, mask_f), expected)
    close(broadcast_to_tokens(seq_adv, mask_f.bool()), expected)


def test_broadcast_shape_error():
    with pytest.raises(ValueError):
        broadcast_to_tokens(torch.zeros(3), torch.ones(2, 4))


def test_group_kernels_by_name():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    valid = torch.ones(1, 4, dtype=torch.bool)
    close(GROUP_ESTIMATORS["grpo"](rewards, valid), [[0.866024, -0.866024, -0.866024, 0.866024]])
    close(GROUP_ESTIMATORS["rloo"](rewards, valid), [[0.666667, -0.666667, -0.666667, 0.666667]])
    # whitening [0.5,-0.5,-0.5,0.5] (unbiased std 0.577350) gives the GRPO numbers for a single group
    close(GROUP_ESTIMATORS["reinforce_pp_baseline"](rewards, valid), [[0.866024, -0.866024, -0.866024, 0.866024]])


# ---------------------------------------------------------------- the token-level contract


def ragged_inputs() -> AdvantageInputs:
    """Two groups of different sizes, interleaved rows, ragged response spans, one failed reward.

    group 7: rows 0, 2, 4 with rewards 1, 0, 0;  group 3: rows 1, 3 with rewards 2 and a failed one.
    """
    loss_mask = torch.tensor([[0, 1, 1, 0, 0],
                              [0, 0, 1, 1, 1],
                              [1, 1, 1, 1, 0],
                              [0, 0, 0, 0, 0],   # the failed reward: no loss tokens
                              [0, 0, 0, 1, 0]], dtype=torch.float32)
    return AdvantageInputs(scores=torch.tensor([1.0, 2.0, 0.0, float("nan"), 0.0]),
                           valid=torch.tensor([True, True, True, False, True]),
                           group_index=torch.tensor([7, 3, 7, 3, 7]), loss_mask=loss_mask)


def test_grouped_estimators_find_ragged_groups_by_index_and_broadcast():
    inp = ragged_inputs()
    # group 7 = [1, 0, 0]: GRPO = [1.154699, -0.577349, -0.577349] (test_grpo_invalid_excluded_from_stats_and_zero);
    # group 3 has one valid reward: no baseline, 0 for both rows
    adv, returns = compute_advantages("grpo", inp)
    assert returns is None
    seq = torch.tensor([1.154699, 0.0, -0.577349, 0.0, -0.577349])
    close(adv, (seq[:, None] * inp.loss_mask).tolist())
    # rloo over group 7: 1 - 0 = 1, 0 - 0.5 = -0.5 (twice)
    adv, _ = compute_advantages("rloo", inp)
    close(adv, (torch.tensor([1.0, 0.0, -0.5, 0.0, -0.5])[:, None] * inp.loss_mask).tolist())
    # Dr.GRPO, through the setting or the name: r - mean = [2/3, -1/3, -1/3]
    dr = (torch.tensor([2 / 3, 0.0, -1 / 3, 0.0, -1 / 3])[:, None] * inp.loss_mask).tolist()
    close(compute_advantages("dr_grpo", inp)[0], dr)
    close(compute_advantages("grpo", inp, AdvantageSettings(norm_by_std=False))[0], dr)


def test_every_estimator_honours_the_contract():
    inp = ragged_inputs()
    for name in ADVANTAGE_ESTIMATORS:
        adv, returns = compute_advantages(name, inp)
        for t in (adv, returns):
            if t is None:
                continue
            assert t.shape == inp.loss_mask.shape and t.dtype == torch.float32, name
            assert torch.isfinite(t).all(), name
            assert (t[inp.loss_mask == 0] == 0).all(), name


def test_row_order_does_not_matter():
    inp = ragged_inputs()
    perm = torch.tensor([4, 1, 0, 3, 2])
    shuffled = AdvantageInputs(scores=inp.scores[perm], valid=inp.valid[perm], group_index=inp.group_index[perm],
                               loss_mask=inp.loss_mask[perm])
    for name in ADVANTAGE_ESTIMATORS:
        torch.testing.assert_close(compute_advantages(name, shuffled)[0], compute_advantages(name, inp)[0][perm])


def test_contract_errors():
    inp = ragged_inputs()
    with pytest.raises(ValueError, match="unknown advantage estimator 'nope'"):
        compute_advantages("nope", inp)
    with pytest.raises(ValueError, match="values must have loss_mask's shape"):
        AdvantageInputs(scores=inp.scores, valid=inp.valid, group_index=inp.group_index, loss_mask=inp.loss_mask,
                        values=torch.zeros(5, 4))
    with pytest.raises(ValueError, match="loss_mask must be"):
        AdvantageInputs(scores=inp.scores, valid=inp.valid, group_index=inp.group_index, loss_mask=torch.zeros(4, 5))


def test_shape_errors():
    with pytest.raises(ValueError):
        grpo_advantages(torch.zeros(4), torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError):
        rloo_advantages(torch.zeros(2, 3), torch.ones(2, 2, dtype=torch.bool))


def test_unbiased_std_value_used():
    # Guard for the std convention: population std (0.5) would give exactly ±1.0 for [1,0,0,1].
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    adv = grpo_advantages(rewards, torch.ones(1, 4, dtype=torch.bool), eps=0.0)
    assert math.isclose(adv[0, 0].item(), math.sqrt(3) / 2, rel_tol=1e-6)  # 0.5 / sqrt(1/3) = sqrt(3)/2
