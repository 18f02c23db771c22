"""The KL-in-reward controllers (Ziegler et al.'s adaptive rule, fixed) and the batch KL they track."""

import json

import pytest
import torch

from rlvr.algorithms.kl_control import AdaptiveKLController, FixedKLController, make_kl_controller, reward_kl
from rlvr.config.algorithm import KLControlConfig


def test_adaptive_controller_update_by_hand():
    ctrl = AdaptiveKLController(0.1, target_kl=0.05, horizon=100)
    ctrl.update(0.1, n_steps=10)  # KL / target - 1 = 1, clipped to 0.2: x (1 + 0.2 * 10 / 100) = 1.02
    assert ctrl.value == pytest.approx(0.102)
    ctrl.update(0.055, n_steps=20)  # error 0.1: x (1 + 0.1 * 20 / 100) = 1.02
    assert ctrl.value == pytest.approx(0.10404)
    ctrl.update(0.0, n_steps=50)  # error -1 clipped to -0.2: x (1 - 0.2 * 50 / 100) = 0.9
    assert ctrl.value == pytest.approx(0.093636)
    ctrl.update(0.05, n_steps=1000)  # on target: unchanged
    assert ctrl.value == pytest.approx(0.093636)


def test_fixed_controller_and_state_round_trip():
    fixed = FixedKLController(0.3)
    fixed.update(10.0, 1000)
    assert fixed.value == 0.3
    ctrl = make_kl_controller(KLControlConfig(type="adaptive", kl_coef=0.2, target_kl=0.1, horizon=10))
    ctrl.update(1.0, 5)
    again = make_kl_controller(KLControlConfig(type="adaptive", kl_coef=0.2, target_kl=0.1, horizon=10))
    again.load_state_dict(json.loads(json.dumps(ctrl.state_dict())))  # as driver.json stores it
    assert again.value == ctrl.value == pytest.approx(0.2 * 1.1)
    with pytest.raises(ValueError):
        AdaptiveKLController(0.1, target_kl=0.0, horizon=10)


def test_reward_kl_is_masked_and_averaged_per_row():
    # k1 = logp - ref: row 0 tokens [0.2, 0.4] -> row mean 0.3; row 1 token [1.0] -> 1.0; row 2 has no token
    logp = torch.tensor([[0.0, -0.8, -0.6], [-1.0, 0.0, 5.0], [0.0, 0.0, 0.0]])
    ref = torch.tensor([[3.0, -1.0, -1.0], [-2.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    mask = torch.tensor([[0, 1, 1], [1, 0, 0], [0, 0, 0]])
    kl, current = reward_kl(logp, ref, mask, "k1")
    torch.testing.assert_close(kl, torch.tensor([[0.0, 0.2, 0.4], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    assert current == pytest.approx((0.3 + 1.0) / 2)
