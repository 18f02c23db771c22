"""Hand-computed checks of the clipped PPO loss, loss aggregation and entropy."""

import math

import pytest
import torch

from rlvr.algorithms.policy_loss import (LOSS_AGG_MODES, aggregate_loss, entropy_from_logits, gspo_loss,
                                         ppo_clip_loss, topr_loss)


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


# ---------------------------------------------------------------- ppo_clip_loss

# old_logp = 0 everywhere, so ratio = exp(logp). Cases (clip_low 0.2, clip_high 0.28 -> range [0.8, 1.28]):
#  row 0: r=1.5  A=+1 : max(-1.5, -1.28) = -1.28   clip active (upper)
#         r=0.5  A=-1 : max( 0.5,  0.8 ) =  0.8    clip active (lower)
#         r=1.1  A=+1 : max(-1.1, -1.1 ) = -1.1    inside the range
#         r=0.5  A=+1 : max(-0.5, -0.8 ) = -0.5    below range but A>0: pessimistic term is unclipped
#  row 1: r=1.25 A=+1 : max(-1.25,-1.25) = -1.25   inside [0.8, 1.28] (would clip at 1.2 with symmetric 0.2)
#         r=1.5  A=-1 : max( 1.5,  1.28) =  1.5    above range but A<0: unclipped
#         padding (mask 0), with a garbage log-ratio 50 and A=5; padding
RATIOS = [[1.5, 0.5, 1.1, 0.5], [1.25, 1.5, math.exp(50.0), 1.0]]
ADV = torch.tensor([[1.0, -1.0, 1.0, 1.0], [1.0, -1.0, 5.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])


def _logp():
    return torch.tensor([[math.log(1.5), math.log(0.5), math.log(1.1), math.log(0.5)],
                         [math.log(1.25), math.log(1.5), 50.0, 0.0]], requires_grad=True)


def test_ppo_clip_asymmetric_values_stats_and_grads():
    logp = _logp()
    old = torch.zeros(2, 4)
    loss, stats = ppo_clip_loss(logp, old, ADV, MASK, clip_low=0.2, clip_high=0.28)
    close(loss, [[-1.28, 0.8, -1.1, -0.5], [-1.25, 1.5, 0.0, 0.0]])
    # clipping active on 2 of the 6 masked tokens
    close(stats["clipfrac"], 2 / 6)
    # ratio mean = (1.5+0.5+1.1+0.5+1.25+1.5)/6 = 6.35/6 = 1.058333
    close(stats["ratio_mean"], 1.058333)
    # approx_kl = -mean(log r) = -(2*0.405465 - 2*0.693147 + 0.095310 + 0.223144)/6 = 0.256910/6 = 0.042818
    close(stats["approx_kl"], 0.042818)
    close(stats["dual_clipfrac"], 0.0)
    for v in stats.values():
        assert v.dim() == 0 and not v.requires_grad
    # d loss / d logp = -A * r where the unclipped term is selected, 0 where the clip is active / masked
    loss.sum().backward()
    close(logp.grad, [[0.0, 0.0, -1.1, -0.5], [-1.25, 1.5, 0.0, 0.0]])


def test_ppo_clip_symmetric_clips_token_that_clip_higher_keeps():
    # With clip_high 0.2 the r=1.25, A=+1 token is clipped to -1.2 (and gets no gradient): 3 of 6 clipped.
    loss, stats = ppo_clip_loss(_logp(), torch.zeros(2, 4), ADV, MASK, clip_low=0.2, clip_high=0.2)
    close(loss, [[-1.2, 0.8, -1.1, -0.5], [-1.2, 1.5, 0.0, 0.0]])
    close(stats["clipfrac"], 3 / 6)


def test_ppo_dual_clip():
    # clip range [0.8, 1.28], c = 3:
    #  r=5 A=-2 : max(10, 2.56) = 10 -> min(10, -A*c = 6) = 6   dual clip active, grad 0
    #  r=2 A=-1 : max(2, 1.28)  = 2  -> min(2, 3)           = 2  grad -A*r = 2
    #  r=5 A=+1 : max(-5,-1.28) = -1.28 (A>0: no dual clip)      grad 0, clip active
    logp = torch.tensor([[math.log(5.0), math.log(2.0), math.log(5.0)]], requires_grad=True)
    old = torch.zeros(1, 3)
    adv = torch.tensor([[-2.0, -1.0, 1.0]])
    mask = torch.ones(1, 3)
    loss, stats = ppo_clip_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28, dual_clip_c=3.0)
    close(loss, [[6.0, 2.0, -1.28]])
    close(stats["dual_clipfrac"], 1 / 3)
    close(stats["clipfrac"], 1 / 3)
    loss.sum().backward()
    close(logp.grad, [[0.0, 2.0, 0.0]])

    # without the dual clip the first token's loss is 10 and its gradient -A*r = 10
    logp2 = logp.detach().clone().requires_grad_(True)
    loss2, _ = ppo_clip_loss(logp2, old, adv, mask, clip_low=0.2, clip_high=0.28)
    close(loss2, [[10.0, 2.0, -1.28]])
    loss2.sum().backward()
    close(logp2.grad, [[10.0, 2.0, 0.0]])


def test_ppo_dual_clip_c_must_exceed_one():
    with pytest.raises(ValueError):
        ppo_clip_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), dual_clip_c=1.0)


def test_ppo_log_ratio_clamped():
    # log-ratio 1000 is clamped to 20: ratio e^20 = 485165195.4; A=-1 -> loss = e^20, finite.
    # A=+1 -> upper clip -> -1.28; gradients finite (0: clamp and clip both cut it).
    logp = torch.tensor([[1000.0, 1000.0]], requires_grad=True)
    loss, _ = ppo_clip_loss(logp, torch.zeros(1, 2), torch.tensor([[-1.0, 1.0]]), torch.ones(1, 2),
                            clip_low=0.2, clip_high=0.28)
    assert math.isclose(loss[0, 0].item(), 485165195.4, rel_tol=1e-5)
    assert math.isclose(loss[0, 1].item(), -1.28, rel_tol=1e-6)
    loss.sum().backward()
    assert torch.isfinite(logp.grad).all()


def test_ppo_on_policy_ratio_one():
    # logp == old_logp: ratio 1, loss = -A, no clipping, approx_kl 0
    logp = torch.tensor([[-0.7, -1.3]])
    loss, stats = ppo_clip_loss(logp, logp.clone(), torch.tensor([[2.0, -0.5]]), torch.ones(1, 2))
    close(loss, [[-2.0, 0.5]])
    close(stats["clipfrac"], 0.0)
    close(stats["approx_kl"], 0.0)
    close(stats["ratio_mean"], 1.0)


# ---------------------------------------------------------------- aggregate_loss on a 2x3 example

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
AMASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
# masked sums s = [1+2, 4] = [3, 4], lengths l = [2, 1], 3 tokens, 2 sequences


def test_agg_token_mean():
    close(aggregate_loss(LOSS, AMASK, "token-mean"), 7 / 3)  # (1+2+4)/3 = 2.333333
    close(aggregate_loss(LOSS, AMASK, "token-mean", n_tokens_global=7), 1.0)  # 7/7


def test_agg_seq_mean_token_sum():
    close(aggregate_loss(LOSS, AMASK, "seq-mean-token-sum"), 3.5)  # (3+4)/2
    close(aggregate_loss(LOSS, AMASK, "seq-mean-token-sum", n_seqs_global=4), 1.75)  # 7/4


def test_agg_seq_mean_token_mean():
    close(aggregate_loss(LOSS, AMASK, "seq-mean-token-mean"), 2.75)  # (3/2 + 4/1)/2 = 5.5/2


def test_agg_seq_mean_token_sum_norm():
    # (3/4 + 4/4)/2 = 0.875 with max_response_len 4 (not the padded width 3)
    close(aggregate_loss(LOSS, AMASK, "seq-mean-token-sum-norm", max_response_len=4), 0.875)
    with pytest.raises(ValueError):
        aggregate_loss(LOSS, AMASK, "seq-mean-token-sum-norm")


def test_agg_fully_masked_sequence_not_counted():
    # A third row with no response tokens: n_seqs default is 2, not 3; garbage in masked slots ignored.
    loss = torch.cat([LOSS, torch.tensor([[float("nan"), float("inf"), 9.0]])])
    mask = torch.cat([AMASK, torch.zeros(1, 3)])
    close(aggregate_loss(loss, mask, "token-mean"), 7 / 3)
    close(aggregate_loss(loss, mask, "seq-mean-token-sum"), 3.5)
    close(aggregate_loss(loss, mask, "seq-mean-token-mean"), 2.75)
    close(aggregate_loss(loss, mask, "seq-mean-token-sum-norm", max_response_len=4), 0.875)


def test_agg_bool_mask_and_empty_mask():
    close(aggregate_loss(LOSS, AMASK.bool(), "token-mean"), 7 / 3)
    for mode in LOSS_AGG_MODES:
        out = aggregate_loss(LOSS, torch.zeros(2, 3), mode, max_response_len=4)
        close(out, 0.0)


def test_agg_unknown_mode_lists_modes():
    with pytest.raises(ValueError) as exc:
        aggregate_loss(LOSS, AMASK, "sum")
    for mode in LOSS_AGG_MODES:
        assert mode in str(exc.value)


# ---------------------------------------------------------------- split invariance (grad accumulation / DP)

# 4 sequences x 3 positions, 9 response tokens in all: micro-batch A (rows 0,1) has 4, B (rows 2,3) has 5.
SPLIT_MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])


def test_token_mean_split_gradients_hand_computed():
    # For L = token-mean(x) every masked x gets gradient 1/N. With the global N = 9 both halves give 1/9.
    # With local means averaged over the 2 micro-batches they would get 1/(2*4)=0.125 and 1/(2*5)=0.1.
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0], [10.0, 11.0, 12.0]], requires_grad=True)
    total = (aggregate_loss(x[:2], SPLIT_MASK[:2], "token-mean", n_tokens_global=9)
             + aggregate_loss(x[2:], SPLIT_MASK[2:], "token-mean", n_tokens_global=9))
    # (1+2+3+4 + 7+8+10+11+12)/9 = 58/9 = 6.444444
    close(total, 58 / 9)
    total.backward()
    g = 1 / 9
    close(x.grad, [[g, g, g], [g, 0, 0], [g, g, 0], [g, g, g]])

    # the local-count version gives a different value: (10/4 + 48/5)/2 = (2.5 + 9.6)/2 = 6.05
    local = (aggregate_loss(x[:2], SPLIT_MASK[:2], "token-mean")
             + aggregate_loss(x[2:], SPLIT_MASK[2:], "token-mean")) / 2
    close(local, 6.05)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_split_invariance_ppo_loss(mode):
    g = torch.Generator().manual_seed(0)
    logp0 = -torch.rand(4, 3, generator=g) * 2
    old = logp0 + 0.3 * torch.randn(4, 3, generator=g)  # ratios spread across the clip range
    adv = torch.randn(4, 3, generator=g)
    kw = {"max_response_len": 5}
    n_tok = SPLIT_MASK.sum()  # 9
    n_seq = 4

    full_logp = logp0.clone().requires_grad_(True)
    pt, _ = ppo_clip_loss(full_logp, old, adv, SPLIT_MASK, clip_low=0.2, clip_high=0.28)
    full = aggregate_loss(pt, SPLIT_MASK, mode, **kw)  # defaults = the full batch's own counts
    full.backward()

    split_logp = logp0.clone().requires_grad_(True)
    acc = torch.zeros(())
    for rows in (slice(0, 2), slice(2, 4)):
        pt_i, _ = ppo_clip_loss(split_logp[rows], old[rows], adv[rows], SPLIT_MASK[rows], clip_low=0.2, clip_high=0.28)
        part = aggregate_loss(pt_i, SPLIT_MASK[rows], mode, n_tokens_global=n_tok, n_seqs_global=n_seq, **kw)
        part.backward()  # accumulate gradients as in gradient accumulation
        acc = acc + part.detach()

    torch.testing.assert_close(acc, full.detach(), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(split_logp.grad, full_logp.grad, atol=1e-6, rtol=1e-6)


# ---------------------------------------------------------------- entropy


def test_entropy_uniform_and_onehot():
    # uniform over 4 -> ln 4 = 1.386294; shifting logits changes nothing; near-one-hot -> ~0
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [1000.0, 1000.0, 1000.0, 1000.0], [100.0, 0.0, 0.0, 0.0]]])
    close(entropy_from_logits(logits), [[1.386294, 1.386294, 0.0]])


def test_entropy_two_way():
    # logits [0, ln 3] -> p = [1/4, 3/4]; H = -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.346574 + 0.215762 = 0.562335
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    close(entropy_from_logits(logits), [[0.562335]])


def test_entropy_masked_vocab_neg_inf():
    # -inf entries have p = 0: [0, 0, -inf] is uniform over 2 -> ln 2 = 0.693147; gradient stays finite
    logits = torch.tensor([[[0.0, 0.0, float("-inf")]]], requires_grad=True)
    h = entropy_from_logits(logits)
    close(h, [[0.693147]])
    h.sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_entropy_gradient():
    # dH/dz_v = -p_v (z_v - sum_u p_u z_u). For [0, ln 3]: p = [.25,.75], E[z] = 0.75 ln 3 = 0.823959
    # dH/dz_0 = -0.25 (0 - 0.823959) = 0.205990 ; dH/dz_1 = -0.75 (1.098612 - 0.823959) = -0.205990
    logits = torch.tensor([[[0.0, math.log(3.0)]]], requires_grad=True)
    entropy_from_logits(logits).sum().backward()
    close(logits.grad, [[[0.205990, -0.205990]]])


def test_behaviour_weights_hand_computed():
    from rlvr.algorithms.policy_loss import behaviour_weights

    prox = torch.tensor([[math.log(0.5), math.log(0.9), math.log(0.2), 0.0]])
    behav = torch.tensor([[math.log(0.25), math.log(0.9), math.log(0.8), 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    w, stats = behaviour_weights(prox, behav, mask, cap=1.5)
    # 0.5/0.25 = 2 -> capped at 1.5; 0.9/0.9 = 1; 0.2/0.8 = 0.25; masked -> 0
    assert torch.allclose(w, torch.tensor([[1.5, 1.0, 0.25, 0.0]]))
    assert stats["behav_weight_mean"].item() == pytest.approx((1.5 + 1.0 + 0.25) / 3)
    assert stats["behav_weight_capped_frac"].item() == pytest.approx(1 / 3)
    assert not w.requires_grad
    with pytest.raises(ValueError, match="cap must be > 0"):
        behaviour_weights(prox, behav, mask, cap=0.0)


def test_decoupled_objective_weights_the_clipped_surrogate():
    """loss per token = w * max(-A r, -A clip(r)), r = pi/pi_prox, w = min(pi_prox/pi_behav, cap)."""
    from rlvr.algorithms.actor_objective import ObjectiveSettings, actor_objective

    logp = torch.tensor([[0.0, math.log(0.6), math.log(0.3)]], requires_grad=True)
    tensors = {"loss_mask": torch.tensor([[0.0, 1.0, 1.0]]), "advantages": torch.tensor([[0.0, 1.0, -1.0]]),
               "old_logp": torch.tensor([[0.0, math.log(0.5), math.log(0.3)]]),
               "behav_logp": torch.tensor([[0.0, math.log(0.25), math.log(0.6)]])}
    settings = ObjectiveSettings(decoupled=True, behaviour_weight_cap=1.5)
    loss, stats = actor_objective(logp, torch.zeros(1, 3), tensors, settings, torch.tensor(2.0), torch.tensor(1.0))
    # token 1: r = 1.2 -> clipped to 1.2 (eps 0.2): -1 * 1.2 = -1.2; w = min(2, 1.5) = 1.5 -> -1.8
    # token 2: r = 1, A = -1 -> +1; w = 0.5 -> 0.5 ; token-mean over 2 tokens: (-1.8 + 0.5) / 2
    assert loss.item() == pytest.approx((-1.8 + 0.5) / 2)
    assert stats["behav_weight_capped_frac"].item() == pytest.approx(0.5)


# ---------------------------------------------------------------- GSPO and TOPR

X = 123.0  # off-mask entries: must not matter


def test_gspo_sequence_ratio_and_clip_by_hand():
    # row 0: token log-ratios 0.1, 0.1 -> mean 0.1, s = e^0.1 = 1.105171 (inside [0.8, 1.2]); A = 1: L = -s per token
    # row 1: log-ratios 0.3, -0.3, 0.6 -> mean 0.2, s = e^0.2 = 1.221403 > 1.2; A = 2: clipped term -2 * 1.2 = -2.4
    #        is larger than -2 * 1.221403 = -2.442806: the whole sequence is clipped (no gradient)
    logp = torch.tensor([[-1.0, -2.0, X], [-1.0, -1.0, -1.0]], requires_grad=True)
    old = torch.tensor([[-1.1, -2.1, -X], [-1.3, -0.7, -1.6]])
    adv = torch.tensor([[1.0, 1.0, 0.0], [2.0, 2.0, 2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    loss, stats = gspo_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2)
    torch.testing.assert_close(loss.detach(), torch.tensor([[-1.105171, -1.105171, 0.0], [-2.4, -2.4, -2.4]]))
    assert float(stats["clipfrac"]) == pytest.approx(3 / 5)
    assert float(stats["ratio_mean"]) == pytest.approx((2 * 1.105171 + 3 * 1.221403) / 5, abs=1e-5)
    # gradient: d(-A s_i,t)/d logp_t = -A s_i on each token of an unclipped sequence, 0 for the clipped one
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.105171, -1.105171, 0.0], [0.0, 0.0, 0.0]]))


def test_gspo_on_one_token_sequences_is_ppo():
    logp = torch.tensor([[-0.5], [-2.0], [-1.0]])
    old = torch.tensor([[-1.0], [-1.5], [-1.0]])
    adv = torch.tensor([[1.0], [-1.0], [0.5]])
    mask = torch.ones(3, 1)
    gspo, _ = gspo_loss(logp, old, adv, mask, 0.2, 0.28)
    ppo, _ = ppo_clip_loss(logp, old, adv, mask, 0.2, 0.28)
    torch.testing.assert_close(gspo, ppo)


def test_topr_by_hand():
    # row 0: A = +1: plain REINFORCE, w = 1, however far pi has moved from mu: L = -logp = [1, 2]
    # row 1: A = -1, sequence log-ratio -0.5 + 0 + 0.2 = -0.3: w = e^-0.3 = 0.740818, L = w * logp = -0.740818
    # row 2: A = -2, log-ratio +1: pi/mu = e > 1, truncated to 1: L = -1 * -2 * -1 = -2
    logp = torch.tensor([[-1.0, -2.0, X], [-1.0, -1.0, -1.0], [-1.0, X, X]], requires_grad=True)
    old = torch.tensor([[-3.0, -3.0, 0.0], [-0.5, -1.0, -1.2], [-2.0, 0.0, 0.0]])
    adv = torch.tensor([[1.0, 1.0, 0.0], [-1.0, -1.0, -1.0], [-2.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    loss, stats = topr_loss(logp, old, adv, mask)
    w = math.exp(-0.3)
    torch.testing.assert_close(loss.detach(), torch.tensor([[1.0, 2.0, 0.0], [-w, -w, -w], [-2.0, 0.0, 0.0]]))
    assert float(stats["positive_frac"]) == pytest.approx(2 / 6)
    assert float(stats["truncated_frac"]) == pytest.approx(3 / 4)  # row 1's tokens are tapered, row 2's are not
    assert float(stats["ratio_mean"]) == pytest.approx((3 * w + 1) / 4, abs=1e-6)
    # the weight carries no gradient: d L / d logp = -w A
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.0, -1.0, 0.0], [w, w, w], [2.0, 0.0, 0.0]]))


def test_topr_weights_and_on_policy_equals_reinforce():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    adv = torch.tensor([[-1.5, -1.5]])
    mask = torch.ones(1, 2)
    loss, _ = topr_loss(logp, logp.detach(), adv, mask, positive_weight=1.0, negative_weight=0.5)
    torch.testing.assert_close(loss.detach(), 0.5 * 1.5 * logp.detach())  # on-policy: ratio 1, then x 0.5
    # on-policy, with unit weights, the gradient is REINFORCE's -A grad logp, which is also PPO's at ratio 1
    logp2 = logp.detach().clone().requires_grad_(True)
    topr, _ = topr_loss(logp2, logp2.detach(), adv, mask)
    topr.sum().backward()
    logp3 = logp.detach().clone().requires_grad_(True)
    ppo, _ = ppo_clip_loss(logp3, logp3.detach(), adv, mask)
    ppo.sum().backward()
    torch.testing.assert_close(logp2.grad, logp3.grad)
