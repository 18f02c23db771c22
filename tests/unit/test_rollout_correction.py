"""The rollout-trainer mismatch: its metrics and every correction mode against hand-computed numbers, the loss's
denominator with rejected tokens, and the config checks."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms.actor_objective import ObjectiveSettings, actor_objective
from rlvr.algorithms.rollout_correction import CorrectionSettings, correction_weights, mismatch_metrics
from rlvr.backends.train_strategy import loss_counts
from rlvr.config.algorithm import RolloutCorrectionConfig
from rlvr.config.base import ConfigError
from rlvr.config.load import config_from_dict
from rlvr.data.batch import TrainBatch
from rlvr.pipeline.rollout_correction_step import correct_actor_batch

# Two sequences; the third column of the first is off the mask (its values must not matter: 9.0 there).
TRAIN = torch.tensor([[-1.0, -2.0, 9.0], [-0.5, -1.5, -1.0]])
ROLLOUT = torch.tensor([[-1.5, -1.0, -9.0], [-0.5, -2.0, -3.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
# d = train - rollout on the mask: 0.5, -1.0 | 0.0, 0.5, 2.0; per sequence: sum -0.5 | 2.5, mean -0.25 | 5/6
E = math.exp


def test_mismatch_metrics_by_hand():
    m = mismatch_metrics(TRAIN, ROLLOUT, MASK)
    d = [0.5, -1.0, 0.0, 0.5, 2.0]
    assert m["rollout_corr/kl"] == pytest.approx(-sum(d) / 5)  # -0.4: the trainer likes these samples more
    assert m["rollout_corr/k3_kl"] == pytest.approx(sum(E(x) - 1 - x for x in d) / 5)
    assert m["rollout_corr/training_log_ppl"] == pytest.approx((1.5 + 1.0) / 2)
    assert m["rollout_corr/training_ppl"] == pytest.approx((E(1.5) + E(1.0)) / 2)
    assert m["rollout_corr/rollout_log_ppl"] == pytest.approx((1.25 + 5.5 / 3) / 2)
    assert m["rollout_corr/rollout_ppl"] == pytest.approx((E(1.25) + E(5.5 / 3)) / 2)
    # training minus rollout log-perplexity per sequence: 0.25 and -5/6
    assert m["rollout_corr/log_ppl_diff"] == pytest.approx((0.25 - 5 / 6) / 2)
    assert m["rollout_corr/log_ppl_abs_diff"] == pytest.approx((0.25 + 5 / 6) / 2)
    assert m["rollout_corr/log_ppl_diff_max"] == pytest.approx(0.25)
    assert m["rollout_corr/log_ppl_diff_min"] == pytest.approx(-5 / 6)
    assert m["rollout_corr/ppl_ratio"] == pytest.approx((E(0.25) + E(-5 / 6)) / 2)
    assert m["rollout_corr/chi2_token"] == pytest.approx(sum(E(2 * x) for x in d) / 5 - 1)
    assert m["rollout_corr/chi2_seq"] == pytest.approx((E(-1.0) + E(5.0)) / 2 - 1)


def test_identical_policies_measure_no_mismatch():
    m = mismatch_metrics(TRAIN, TRAIN.clone(), MASK)
    for key in ("kl", "k3_kl", "log_ppl_diff", "log_ppl_abs_diff", "chi2_token", "chi2_seq"):
        assert m[f"rollout_corr/{key}"] == pytest.approx(0.0, abs=1e-6), key
    assert m["rollout_corr/ppl_ratio"] == pytest.approx(1.0)
    assert mismatch_metrics(TRAIN, ROLLOUT, torch.zeros_like(MASK)) == {}


@pytest.mark.parametrize("level, expected", [
    ("token", [[E(0.5), E(-1.0), 0.0], [1.0, E(0.5), 2.0]]),  # e^2 truncated to 2
    ("geometric", [[E(-0.25), E(-0.25), 0.0], [2.0, 2.0, 2.0]]),  # e^(5/6) = 2.30 truncated
    ("sequence", [[E(-0.5), E(-0.5), 0.0], [2.0, 2.0, 2.0]]),  # e^2.5 truncated
])
def test_truncated_is_at_each_level(level, expected):
    weights, keep, stats = correction_weights(TRAIN, ROLLOUT, MASK, CorrectionSettings(is_level=level))
    assert torch.allclose(weights, torch.tensor(expected))
    assert keep.tolist() == MASK.tolist()  # truncation rejects nothing
    truncated = {"token": 1 / 5, "geometric": 3 / 5, "sequence": 3 / 5}[level]
    assert stats["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(truncated)
    kept = [w for row, mrow in zip(expected, MASK.tolist()) for w, m in zip(row, mrow) if m]
    assert stats["rollout_corr/rollout_is_mean"] == pytest.approx(sum(kept) / 5)
    assert stats["rollout_corr/rollout_is_max"] == pytest.approx(max(kept))
    assert stats["rollout_corr/rollout_is_eff_sample_size"] == pytest.approx(
        sum(kept) ** 2 / (5 * sum(w * w for w in kept)))


def test_truncated_is_with_a_floor():
    weights, _, stats = correction_weights(TRAIN, ROLLOUT, MASK, CorrectionSettings(
        is_level="token", is_threshold=2.0, is_threshold_lower=0.5))
    assert weights[0, 1] == pytest.approx(0.5)  # e^-1 = 0.37 raised to the floor
    assert stats["rollout_corr/rollout_is_ratio_fraction_low"] == pytest.approx(1 / 5)


@pytest.mark.parametrize("level, upper, lower, keep, seq_frac", [
    # token ratios 1.65, 0.37 | 1, 1.65, 7.39 in [0.5, 2]: the 0.37 and the 7.39 go
    ("token", 2.0, None, [[1, 0, 0], [1, 1, 0]], 1.0),
    # geometric means 0.78 | 2.30: the second sequence goes whole
    ("geometric", 2.0, None, [[1, 1, 0], [0, 0, 0]], 0.5),
    # products 0.61 | 12.2 in [0.7, 20]: the first sequence goes whole
    ("sequence", 20.0, 0.7, [[0, 0, 0], [1, 1, 1]], 0.5),
])
def test_masked_is_at_each_level(level, upper, lower, keep, seq_frac):
    weights, kept, stats = correction_weights(TRAIN, ROLLOUT, MASK, CorrectionSettings(
        rs_level=level, rs_threshold=upper, rs_threshold_lower=lower))
    assert kept.tolist() == keep
    assert weights.tolist() == keep  # no IS: weight 1 on what is kept
    rejected = 5 - sum(map(sum, keep))
    assert stats["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(rejected / 5)
    assert stats["rollout_corr/rollout_rs_seq_masked_fraction"] == pytest.approx(seq_frac)


def _objective(batch: TrainBatch, logp: torch.Tensor) -> torch.Tensor:
    n_tokens, n_seqs = loss_counts(batch)
    loss, _ = actor_objective(logp, torch.zeros_like(logp), batch.tensors, ObjectiveSettings(), n_tokens, n_seqs)
    return loss


def _batch() -> TrainBatch:
    return TrainBatch({"loss_mask": MASK.clone(), "behav_logp": ROLLOUT.clone(),
                       "advantages": torch.ones_like(MASK)})


def test_rejected_tokens_leave_the_denominator():
    """On-policy (ratio 1, advantage 1): the loss is -sum(w * keep) / count. Token RS keeps 3 tokens; the loss
    averages over those 3, not over the 5 the mask had (slime's PR 657); fixed_denominator keeps 5 (AReaL)."""
    rc = RolloutCorrectionConfig(rs_level="token")
    batch, metrics = correct_actor_batch(_batch(), TRAIN, rc)
    assert loss_counts(batch)[0] == 3 and metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(0.4)
    assert float(_objective(batch, TRAIN)) == pytest.approx(-1.0)  # -3 / 3
    fixed, _ = correct_actor_batch(_batch(), TRAIN, rc.model_copy(update={"fixed_denominator": True}))
    assert loss_counts(fixed)[0] == 5
    assert float(_objective(fixed, TRAIN)) == pytest.approx(-3 / 5)
    assert "rollout_corr/kl" in metrics  # the mismatch is measured alongside


def test_is_weights_scale_each_tokens_term():
    rc = RolloutCorrectionConfig(is_level="token")
    batch, _ = correct_actor_batch(_batch(), TRAIN, rc)
    assert "count_mask" not in batch.tensors and batch["loss_mask"].tolist() == MASK.tolist()
    expected = -(E(0.5) + E(-1.0) + 1.0 + E(0.5) + 2.0) / 5
    assert float(_objective(batch, TRAIN)) == pytest.approx(expected)


@pytest.mark.parametrize("level", ["token", "geometric", "sequence"])
def test_is_weights_from_the_updates_own_logprobs_equal_the_drivers(level):
    """In the on-policy single update the objective may weigh the tokens itself, from the logprobs it is given
    (`ObjectiveSettings.rollout_is`): the same loss, value and gradient, as the driver's weights from a forward
    pass of their own."""
    rc = RolloutCorrectionConfig(is_level=level, is_threshold=1.5)
    driver, _ = correct_actor_batch(_batch(), TRAIN, rc)
    n_tokens, n_seqs = loss_counts(driver)
    own = ObjectiveSettings(rollout_is=CorrectionSettings.from_fields(rc))
    losses, grads = [], []
    for tensors, settings in ((driver.tensors, ObjectiveSettings()), (_batch().tensors, own)):
        logp = TRAIN.clone().requires_grad_(True)
        loss, _ = actor_objective(logp, torch.zeros_like(logp), tensors, settings, n_tokens, n_seqs)
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append(logp.grad)
    assert losses[0] == pytest.approx(losses[1]) and torch.allclose(grads[0], grads[1])
    if level == "token":  # by hand: d = 0.5, -1.0 | 0.0, 0.5, 2.0, weights truncated at 1.5
        assert losses[1] == pytest.approx(-(1.5 + E(-1.0) + 1.0 + 1.5 + 1.5) / 5)


def test_the_update_weighs_tokens_only_where_it_can():
    """Its own weights when on-policy with one update and IS only; else (rejection, several updates, stale data,
    the decoupled loss, a KL in the reward) the driver's forward pass, as before."""
    on = config_from_dict(_cfg(rollout_correction={"is_level": "token"}))
    assert on.single_update and on.corrects_in_update
    assert not config_from_dict(_cfg(rollout_correction={"is_level": "token", "rs_level": "token"})).corrects_in_update
    tree = {**_cfg(rollout_correction={"is_level": "token"}), "actor_train": {"ppo_epochs": 2}}
    assert not config_from_dict(tree).single_update and not config_from_dict(tree).corrects_in_update
    tree = {**_cfg(rollout_correction={"is_level": "token"}, decoupled_loss=True),
            "overlap": {"one_step_off_policy": True}}
    assert not config_from_dict(tree).corrects_in_update
    assert not config_from_dict(_cfg(rollout_correction={"is_level": "token"}, use_kl_in_reward=True)
                                ).corrects_in_update


def test_is_weights_take_the_decoupled_weights_place():
    """Decoupled loss + IS: one weight per token (the rollout correction's), not both multiplied."""
    batch, _ = correct_actor_batch(_batch(), TRAIN, RolloutCorrectionConfig(is_level="token", is_threshold=1.5))
    batch = batch.with_tensor("old_logp", TRAIN)
    n_tokens, n_seqs = loss_counts(batch)
    decoupled = ObjectiveSettings(decoupled=True, behaviour_weight_cap=100.0)
    loss, _ = actor_objective(TRAIN, torch.zeros_like(TRAIN), batch.tensors, decoupled, n_tokens, n_seqs)
    assert float(loss) == pytest.approx(-(1.5 + E(-1.0) + 1.0 + 1.5 + 1.5) / 5)


def test_metrics_only_leaves_the_batch_alone():
    before = _batch()
    after, metrics = correct_actor_batch(before, TRAIN, RolloutCorrectionConfig())
    assert after.tensors.keys() == before.tensors.keys() and torch.equal(after["loss_mask"], MASK)
    assert metrics["rollout_corr/rollout_is_max"] == pytest.approx(E(2.0))  # the raw ratios, described
    assert "rollout_corr/rollout_rs_masked_fraction" not in metrics


def _cfg(**algorithm) -> dict:
    return {"data": {"train_files": ["x.jsonl"]}, "domains": {"d": {"reward": {"worker": "x.Y"}}},
            "algorithm": algorithm}


def test_a_correction_turns_on_behaviour_logprobs():
    cfg = config_from_dict(_cfg(rollout_correction={"rs_level": "geometric"}))
    assert cfg.generation.return_logprobs and cfg.uses_behaviour_logprobs
    assert not config_from_dict(_cfg()).generation.return_logprobs


def test_is_weights_over_stale_data_need_the_decoupled_loss():
    tree = {**_cfg(rollout_correction={"is_level": "token"}), "overlap": {"one_step_off_policy": True}}
    with pytest.raises(ConfigError, match="algorithm.rollout_correction.is_level: .*decoupled_loss"):
        config_from_dict(tree)
    tree["algorithm"]["decoupled_loss"] = True
    assert config_from_dict(tree).algorithm.rollout_correction.is_level == "token"


def test_bad_levels_and_thresholds_name_their_key():
    with pytest.raises(ConfigError, match="algorithm.rollout_correction.rs_level"):
        config_from_dict(_cfg(rollout_correction={"rs_level": "tokens"}))
    with pytest.raises(ConfigError, match="algorithm.rollout_correction.rs_threshold"):
        config_from_dict(_cfg(rollout_correction={"rs_threshold": 0.5}))
