"""The driver's advantage phase: KL in the reward, per-domain reward processing and weights, critic metrics, and its
state (KL controller, running moments) across a checkpoint."""

import json

import pytest
import torch

from rlvr.algorithms.returns import gae_advantages, masked_whiten, token_level_rewards
from rlvr.config.load import config_from_dict
from rlvr.pipeline.advantage_step import AdvantageStep
from rlvr.pipeline.batching import make_train_batch
from tests.helpers.groups import group


def config(algorithm: dict, **domain_processing) -> object:
    reward = {"worker": "rlvr.workers.rewards.math_rule.MathRuleRewardWorker"}
    domains = {d: {"reward": dict(reward), "reward_processing": domain_processing.get(d, {})} for d in ("a", "b")}
    return config_from_dict({"data": {"train_files": ["t.jsonl"]}, "domains": domains,
                             "rollout": {"domain_interleave_probs": {"a": 0.5, "b": 0.5}}, "algorithm": algorithm})


def batch_with_forwards(seed: int = 0):
    groups = {"a": [group("a", "a0", [1.0, 0.0]), group("a", "a1", [2.0, 0.0])],
              "b": [group("b", "b0", [1.0, 0.0, None])]}
    batch, _, _ = make_train_batch(groups, ["a", "b"], pad_id=0, seed=3)
    g = torch.Generator().manual_seed(seed)
    shape = batch["loss_mask"].shape
    for key in ("old_logp", "ref_logp"):
        batch = batch.with_tensor(key, -torch.rand(shape, generator=g) * batch["loss_mask"])
    return batch.with_tensor("values", torch.rand(shape, generator=g) * batch["loss_mask"])


def test_ppo_advantages_pay_the_kl_and_whiten_per_domain():
    cfg = config({"preset": "ppo", "kl_ctrl": {"type": "fixed", "kl_coef": 0.1}, "lam": 0.9})
    batch = batch_with_forwards()
    out, metrics = AdvantageStep(cfg)(batch)
    mask, kl = batch["loss_mask"], (batch["old_logp"] - batch["ref_logp"]) * batch["loss_mask"]  # k1
    for i, d in enumerate(("a", "b")):
        rows = batch["domain_index"] == i
        rewards = token_level_rewards(batch["scores"][rows], mask[rows], kl[rows], 0.1)
        adv, ret = gae_advantages(rewards, batch["values"][rows], mask[rows], 1.0, 0.9)
        torch.testing.assert_close(out["advantages"][rows], masked_whiten(adv, mask[rows]))
        torch.testing.assert_close(out["returns"][rows], ret)
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.1
    per_row = kl.sum(1)[mask.sum(1) > 0] / mask.sum(1)[mask.sum(1) > 0]
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(float(per_row.mean()))
    assert {"critic/values/mean", "critic/returns/mean", "critic/vf_explained_var"} <= set(metrics)
    assert (out["advantages"][mask == 0] == 0).all() and (out["returns"][mask == 0] == 0).all()


def test_domain_weight_and_advantage_clip_act_on_their_domain_only():
    plain, _ = AdvantageStep(config({"preset": "grpo"}))(batch_with_forwards())
    cfg = config({"preset": "grpo"}, b={"reward_weight": 0.5, "advantage_clip": 0.6})
    weighted, metrics = AdvantageStep(cfg)(batch_with_forwards())
    a, b = plain["domain_index"] == 0, plain["domain_index"] == 1
    torch.testing.assert_close(weighted["advantages"][a], plain["advantages"][a])
    torch.testing.assert_close(weighted["advantages"][b], 0.5 * plain["advantages"][b].clamp(-0.6, 0.6))
    assert metrics["b/advantage/clip_frac"] == 1.0 and "a/advantage/clip_frac" not in metrics  # |A| = 0.7071


def test_state_across_a_checkpoint_gives_the_uninterrupted_run():
    cfg = config({"preset": "reinforce_pp", "kl_ctrl": {"type": "adaptive", "kl_coef": 0.2, "target_kl": 0.01,
                                                         "horizon": 20},
                  "reward_processing": {"norm_mean_type": "running", "norm_std_type": "running"}})
    uninterrupted = AdvantageStep(cfg)
    uninterrupted(batch_with_forwards(seed=1))
    state = json.loads(json.dumps(uninterrupted.state_dict()))  # as driver.json holds it
    expected, expected_metrics = uninterrupted(batch_with_forwards(seed=2))

    resumed = AdvantageStep(cfg)
    resumed.load_state_dict(state)
    again, metrics = resumed(batch_with_forwards(seed=2))
    torch.testing.assert_close(again["advantages"], expected["advantages"])
    assert metrics == expected_metrics
    assert metrics["actor/reward_kl_penalty_coeff"] != 0.2  # the controller had moved, and it came back moved
    assert metrics["a/reward/running_mean"] == pytest.approx((1 + 0 + 2 + 0) * 2 / 8)  # two steps of a's rewards
    fresh, _ = AdvantageStep(cfg)(batch_with_forwards(seed=2))
    assert not torch.allclose(fresh["advantages"], expected["advantages"])  # without the state: another result
