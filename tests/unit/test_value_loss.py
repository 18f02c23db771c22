"""Hand-computed checks of the critic's clipped value loss and explained variance."""

import math

import pytest
import torch

from rlvr.algorithms.value_loss import ValueSettings, clipped_value_loss, explained_variance, value_objective


def test_clipped_value_loss_by_hand():
    # old values 0.5, clip range 0.2 -> clipped prediction in [0.3, 0.7]:
    #  v=1.0, R=2: unclipped (1-2)^2 = 1, clipped (0.7-2)^2 = 1.69 -> max 1.69 (clip active) -> 0.845
    #  v=0.0, R=0: unclipped 0, clipped (0.3-0)^2 = 0.09 -> 0.09 (active) -> 0.045
    #  v=2.0, R=0: unclipped 4, clipped (0.7-0)^2 = 0.49 -> 4 (not active) -> 2.0
    #  column 3 is off the mask: its NaN must not leak
    values = torch.tensor([[1.0, 0.0, 2.0, float("nan")]], requires_grad=True)
    old = torch.tensor([[0.5, 0.5, 0.5, 0.5]])
    returns = torch.tensor([[2.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    loss, stats = clipped_value_loss(values, old, returns, mask, 0.2)
    torch.testing.assert_close(loss.detach(), torch.tensor([[0.845, 0.045, 2.0, 0.0]]))
    assert float(stats["clipfrac"]) == pytest.approx(2 / 3)
    # the clipped terms are constant in v where they win: only the third token has a gradient, v - R = 2 (/ 3 tokens)
    loss.sum().div(3).backward()
    torch.testing.assert_close(values.grad, torch.tensor([[0.0, 0.0, 2.0 / 3, 0.0]]))


def test_no_cliprange_is_the_plain_squared_error():
    values, old, returns = torch.tensor([[1.0, 3.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    loss, stats = clipped_value_loss(values, old, returns, torch.ones(1, 2), None)
    torch.testing.assert_close(loss, torch.tensor([[0.5, 2.0]]))
    assert float(stats["clipfrac"]) == 0.0
    with pytest.raises(ValueError, match="cliprange must be > 0"):
        clipped_value_loss(values, old, returns, torch.ones(1, 2), 0.0)


def test_value_objective_normalises_by_the_global_token_count():
    # the same two tokens as one micro-batch or two: the parts' losses add up to the whole's
    values, old, returns = torch.tensor([[1.0, 3.0]]), torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0, 1.0]])
    tensors = {"loss_mask": torch.ones(1, 2), "values": old, "returns": returns}
    settings = ValueSettings(cliprange_value=None)
    whole, stats = value_objective(values, tensors, settings, torch.tensor(2.0), torch.tensor(1))
    assert float(whole) == pytest.approx((0.5 + 2.0) / 2)
    parts = [value_objective(values[:, i:i + 1], {k: v[:, i:i + 1] for k, v in tensors.items()}, settings,
                             torch.tensor(2.0), torch.tensor(1))[0] for i in range(2)]
    assert float(sum(parts)) == pytest.approx(float(whole))
    assert float(stats["vpred_mean"]) == pytest.approx(2.0)


def test_explained_variance():
    # R = [1,2,3,4], V = [1,2,3,5]: R - V = [0,0,0,-1], population var 0.1875; var(R) = 1.25 -> 1 - 0.15 = 0.85
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0, 100.0]])
    values = torch.tensor([[1.0, 2.0, 3.0, 5.0, -100.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    assert explained_variance(values, returns, mask) == pytest.approx(0.85)
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert math.isnan(explained_variance(values, torch.ones(1, 5), mask))  # constant returns: undefined
