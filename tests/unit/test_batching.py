"""make_train_batch + the advantage phase: rows shuffled, advantages computed per domain and following their rows."""

import pytest
import torch

from rlvr.config.load import config_from_dict
from rlvr.pipeline.advantage_step import AdvantageStep
from rlvr.pipeline.batching import make_train_batch
from tests.helpers.groups import group


def test_advantages_per_domain_follow_their_rows():
    groups = {"a": [group("a", "a0", [1.0, 0.0]), group("a", "a1", [2.0, 0.0])],
              "b": [group("b", "b0", [1.0, 0.0, None])]}
    batch, samples, metrics = make_train_batch(groups, ["a", "b"], pad_id=0, seed=3)
    assert sorted(s.response_text for s in samples) == ["a0-0", "a0-1", "a1-0", "a1-1", "b0-0", "b0-1", "b0-2"]
    reward = {"worker": "rlvr.workers.rewards.math_rule.MathRuleRewardWorker"}
    cfg = config_from_dict({"data": {"train_files": ["t.jsonl"]}, "domains": {"a": {"reward": reward},
                            "b": {"reward": reward}}, "rollout": {"domain_interleave_probs": {"a": 0.5, "b": 0.5}},
                            "algorithm": "reinforce_pp_baseline"})
    batch, adv_metrics = AdvantageStep(cfg)(batch)
    # domain a alone: centred [0.5, -0.5, 1, -1], whitened by its own std 0.912871 (test_advantages:
    # test_reinforce_pp_baseline_basic) -> [0.547722, -0.547722, 1.095444, -1.095444]
    # domain b alone: centred [0.5, -0.5], std 0.707107 -> [0.707106, -0.707106]; the failed one 0
    expected = {"a0-0": 0.547722, "a0-1": -0.547722, "a1-0": 1.095444, "a1-1": -1.095444,
                "b0-0": 0.707106, "b0-1": -0.707106, "b0-2": 0.0}
    mask = batch["loss_mask"]
    for row, s in enumerate(samples):
        tokens = batch["advantages"][row][mask[row] == 1]
        assert len(tokens) == (len(s.response_ids) if s.scored_ok else 0)
        assert torch.allclose(tokens, torch.full_like(tokens, expected[s.response_text]), atol=1e-5)
    assert (batch["advantages"][mask == 0] == 0).all()
    assert batch.get("returns") is None
    assert adv_metrics["b/advantage/abs_mean"] == pytest.approx(0.707106, abs=1e-5)
    assert metrics["a/groups/with_signal_frac"] == 1.0 and metrics["b/groups/with_signal_frac"] == 0.0
    assert metrics["batch/samples"] == 7 and metrics["batch/masked_samples"] == 1


def test_the_same_seed_gives_the_same_rows():
    groups = {"a": [group("a", f"a{i}", [1.0, 0.0]) for i in range(3)]}
    first, _, _ = make_train_batch(groups, ["a"], pad_id=0, seed=5)
    again, _, _ = make_train_batch(groups, ["a"], pad_id=0, seed=5)
    other, _, _ = make_train_batch(groups, ["a"], pad_id=0, seed=6)
    assert torch.equal(first["input_ids"], again["input_ids"])
    assert not torch.equal(first["input_ids"], other["input_ids"])
