import math

import torch

from rlvr.data.batch import build_train_batch
from rlvr.data.types import Prompt, Sample
from rlvr.workers.rewards.result import RewardResult


def sample(prompt_ids, response_ids, reward):
    prompt = Prompt(uid="u", domain="d", ground_truth="1", prompt_ids=prompt_ids)
    return Sample(prompt=prompt, group_id="g", index=0, response_ids=response_ids, response_text="",
                  finish_reason="stop", policy_version=0, reward=reward)


def test_layout_masks_and_advantages():
    ok = RewardResult(1.0, True)
    failed = RewardResult.failed("timeout", "slow")
    batch = build_train_batch([sample([1, 2], [3, 4, 5], ok), sample([6], [7], failed)],
                              torch.tensor([0.5, -2.0]), pad_id=0)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5], [6, 7, 0, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    # column t is about target token t+1: the response tokens 3,4,5 are targets at columns 1,2,3
    assert batch["loss_mask"].tolist() == [[0, 1, 1, 1], [0, 0, 0, 0]]  # failed reward: masked out entirely
    assert batch["advantages"].tolist() == [[0, 0.5, 0.5, 0.5], [0, 0, 0, 0]]
    assert math.isnan(failed.reward)


def test_trim_and_split():
    ok = RewardResult(1.0, True)
    batch = build_train_batch([sample([1], [2], ok), sample([1, 2, 3], [4, 5], ok)], torch.zeros(2), pad_id=0)
    first, second = batch.split(1)
    assert first.trimmed()["input_ids"].tolist() == [[1, 2]]
    assert first.trimmed()["loss_mask"].shape == (1, 1)
    assert second.trimmed()["input_ids"].shape == (1, 5)


def test_behaviour_logprobs_aligned_with_the_response_targets():
    ok = RewardResult(1.0, True)
    a, b = sample([1, 2], [3, 4, 5], ok), sample([6], [7], ok)
    a.logprobs, b.logprobs = [-0.1, -0.2, -0.3], [-0.4]
    batch = build_train_batch([a, b], torch.tensor([1.0, 1.0]), pad_id=0)
    assert torch.allclose(batch["behav_logp"], torch.tensor([[0, -0.1, -0.2, -0.3], [-0.4, 0, 0, 0]]))
    b.logprobs = None  # an engine that did not return them: no tensor rather than a wrong one
    assert build_train_batch([a, b], torch.tensor([1.0, 1.0]), pad_id=0).get("behav_logp") is None


def test_first_loss_column_and_the_target_aligned_view_from_it():
    ok = RewardResult(1.0, True)
    batch = build_train_batch([sample([1, 2, 3], [4, 5], ok), sample([6, 7], [8, 9, 10], ok)],
                              torch.tensor([1.0, -1.0]), pad_id=0)
    # the second row's response starts earlier (target column 1): nothing before it needs logits
    assert batch["loss_mask"].tolist() == [[0, 0, 1, 1], [0, 1, 1, 1]]
    assert batch.first_loss_column() == 1
    view = batch.from_column(1)
    assert view["input_ids"].tolist() == batch["input_ids"].tolist()  # the model still reads the whole context
    assert view["loss_mask"].tolist() == [[0, 1, 1], [1, 1, 1]]
    assert view["advantages"].tolist() == [[0, 1, 1], [-1, -1, -1]]
    failed = RewardResult.failed("timeout", "slow")
    none_in_loss = build_train_batch([sample([1, 2], [3], failed)], torch.zeros(1), pad_id=0)
    assert none_in_loss.first_loss_column() == 1  # the last column: a forward still needs one
