"""Hand-computed token rewards, discounted returns, GAE (ragged rows, a multi-turn hole, several gamma / lambda)
and masked whitening. Expected numbers are worked out in the comments."""

import pytest
import torch

from rlvr.algorithms.returns import discounted_returns, gae_advantages, masked_whiten, token_level_rewards

X = 9.0  # a value at a position off the mask: must never matter

# row 0: response at columns 1..3 (score 1); row 1: a two-turn row, actions at 1, 3, 4 and an observation token at
# column 2 (score 2); row 2: a failed reward, no action tokens (score NaN); row 3: a one-token response at column 0.
MASK = torch.tensor([[0, 1, 1, 1, 0],
                     [0, 1, 0, 1, 1],
                     [0, 0, 0, 0, 0],
                     [1, 0, 0, 0, 0]], dtype=torch.float32)
SCORES = torch.tensor([1.0, 2.0, float("nan"), -1.0])
VALUES = torch.tensor([[X, 0.5, 0.6, 0.7, X],
                       [X, 0.2, X, 0.4, 0.8],
                       [X, X, X, X, X],
                       [0.3, X, X, X, X]])


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


def test_token_rewards_put_the_score_on_the_last_action_token_and_the_kl_on_every_one():
    close(token_level_rewards(SCORES, MASK), [[0, 0, 0, 1, 0], [0, 0, 0, 0, 2], [0] * 5, [-1, 0, 0, 0, 0]])
    kl = torch.full((4, 5), 0.5)
    kl[1, 2] = 100.0  # an observation token's "KL" is not the policy's doing: ignored
    # row 0: -0.1 * 0.5 = -0.05 on columns 1..3, +1 on column 3 -> 0.95
    close(token_level_rewards(SCORES, MASK, kl, 0.1),
          [[0, -0.05, -0.05, 0.95, 0], [0, -0.05, 0, -0.05, 1.95], [0] * 5, [-1.05, 0, 0, 0, 0]])


def test_discounted_returns_skip_observation_tokens():
    rewards = token_level_rewards(SCORES, MASK)
    close(discounted_returns(rewards, MASK, 1.0), [[0, 1, 1, 1, 0], [0, 2, 0, 2, 2], [0] * 5, [-1, 0, 0, 0, 0]])
    # gamma 0.5, counted in action steps (the observation column 2 of row 1 is not a step):
    # row 0: G3 = 1, G2 = 0.5, G1 = 0.25;  row 1: G4 = 2, G3 = 1, G1 = 0.5
    close(discounted_returns(rewards, MASK, 0.5),
          [[0, 0.25, 0.5, 1, 0], [0, 0.5, 0, 1, 2], [0] * 5, [-1, 0, 0, 0, 0]])


# (gamma, lambda) -> (advantages, returns), by hand with delta_t = r_t + gamma V(next action) - V_t,
# A_t = delta_t + gamma lambda A_next, R_t = A_t + V_t; V = 0 past the last action:
#   gamma 1, lambda 1 (Monte Carlo): A = G - V. row 0: 1 - [0.5, 0.6, 0.7]; row 1: 2 - [0.2, 0.4, 0.8];
#     row 3: -1 - 0.3; returns = G.
#   gamma 1, lambda 0 (one-step TD): row 0: t3 = 1 - 0.7 = 0.3, t2 = 0.7 - 0.6 = 0.1, t1 = 0.6 - 0.5 = 0.1;
#     row 1: t4 = 2 - 0.8 = 1.2, t3 = 0.8 - 0.4 = 0.4, t1 = 0.4 - 0.2 = 0.2; row 3: -1.3.
#   gamma 0.9, lambda 0.5 (gamma lambda = 0.45):
#     row 0: t3: delta 0.3, A 0.3;  t2: delta 0.9*0.7 - 0.6 = 0.03, A = 0.03 + 0.45*0.3 = 0.165;
#            t1: delta 0.9*0.6 - 0.5 = 0.04, A = 0.04 + 0.45*0.165 = 0.11425; R = [0.61425, 0.765, 1.0]
#     row 1: t4: delta 1.2, A 1.2;  t3: delta 0.9*0.8 - 0.4 = 0.32, A = 0.32 + 0.54 = 0.86;
#            t1 (next action is t3): delta 0.9*0.4 - 0.2 = 0.16, A = 0.16 + 0.45*0.86 = 0.547; R = [0.747, 1.26, 2.0]
#     row 3: delta -1 - 0.3 = -1.3
GAE_CASES = {
    (1.0, 1.0): ([[0, 0.5, 0.4, 0.3, 0], [0, 1.8, 0, 1.6, 1.2], [0] * 5, [-1.3, 0, 0, 0, 0]],
                 [[0, 1, 1, 1, 0], [0, 2, 0, 2, 2], [0] * 5, [-1, 0, 0, 0, 0]]),
    (1.0, 0.0): ([[0, 0.1, 0.1, 0.3, 0], [0, 0.2, 0, 0.4, 1.2], [0] * 5, [-1.3, 0, 0, 0, 0]],
                 [[0, 0.6, 0.7, 1.0, 0], [0, 0.4, 0, 0.8, 2.0], [0] * 5, [-1, 0, 0, 0, 0]]),
    (0.9, 0.5): ([[0, 0.11425, 0.165, 0.3, 0], [0, 0.547, 0, 0.86, 1.2], [0] * 5, [-1.3, 0, 0, 0, 0]],
                 [[0, 0.61425, 0.765, 1.0, 0], [0, 0.747, 0, 1.26, 2.0], [0] * 5, [-1, 0, 0, 0, 0]]),
}


@pytest.mark.parametrize("gamma,lam", list(GAE_CASES))
def test_gae_on_ragged_masked_rows(gamma, lam):
    adv, ret = gae_advantages(token_level_rewards(SCORES, MASK), VALUES, MASK, gamma, lam)
    expected_adv, expected_ret = GAE_CASES[(gamma, lam)]
    close(adv, expected_adv)
    close(ret, expected_ret)


def test_gae_with_lambda_1_is_the_discounted_return_minus_the_value():
    rewards = token_level_rewards(SCORES, MASK, torch.rand(4, 5), 0.2)
    adv, ret = gae_advantages(rewards, VALUES, MASK, 0.8, 1.0)
    g = discounted_returns(rewards, MASK, 0.8)
    close(adv, (torch.where(MASK.bool(), g - VALUES, torch.zeros(4, 5))).tolist())
    close(ret, g.tolist())


def test_masked_whiten():
    # masked entries 1, 2, 3, 5: mean 2.75, unbiased var = (3.0625 + 0.5625 + 0.0625 + 5.0625) / 3 = 2.916667,
    # std 1.707825 -> [-1.024695, -0.439155, 0.146385, 1.317465]
    x = torch.tensor([[1.0, 2.0, 100.0], [3.0, 5.0, -7.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    close(masked_whiten(x, mask), [[-1.024695, -0.439155, 0.0], [0.146385, 1.317465, 0.0]])
    # fewer than two entries: no spread to scale by, 0
    close(masked_whiten(x, torch.tensor([[1, 0, 0], [0, 0, 0]])), [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
