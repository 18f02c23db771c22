import math

import torch

from rlvr.data.batch import build_train_batch
from rlvr.data.reward_result import RewardResult
from rlvr.data.types import Prompt, Sample


def sample(prompt_ids, response_ids, reward, group="g", domain="d"):
    prompt = Prompt(uid="u", domain=domain, ground_truth="1", prompt_ids=prompt_ids)
    return Sample(prompt=prompt, group_id=group, index=0, response_ids=response_ids, response_text="",
                  finish_reason="stop", policy_version=0, reward=reward)


def test_layout_masks_and_per_row_tensors():
    ok = RewardResult(1.0, True)
    failed = RewardResult.failed("timeout", "slow")
    batch = build_train_batch([sample([1, 2], [3, 4, 5], ok), sample([6], [7], failed)], pad_id=0)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5], [6, 7, 0, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    # column t is about target token t+1: the response tokens 3,4,5 are targets at columns 1,2,3
    assert batch["loss_mask"].tolist() == [[0, 1, 1, 1], [0, 0, 0, 0]]  # failed reward: masked out entirely
    assert batch.get("advantages") is None  # the driver adds them after the forward passes
    assert batch["scores"][0] == 1.0 and math.isnan(batch["scores"][1])
    assert batch["valid"].tolist() == [True, False]
    assert math.isnan(failed.reward)


def test_group_and_domain_index():
    ok = RewardResult(1.0, True)
    rows = [sample([1], [2], ok, "g1", "b"), sample([1], [3], ok, "g2", "a"), sample([1], [4], ok, "g1", "b"),
            sample([1], [5], ok, "g1", "a")]  # the same group id in another domain is another group
    batch = build_train_batch(rows, pad_id=0, domains=["a", "b"])
    assert batch["group_index"].tolist() == [0, 1, 0, 2]
    assert batch["domain_index"].tolist() == [1, 0, 1, 0]
    assert build_train_batch(rows, pad_id=0)["domain_index"].tolist() == [0, 1, 0, 1]  # order of appearance


def test_trim_and_split():
    ok = RewardResult(1.0, True)
    batch = build_train_batch([sample([1], [2], ok), sample([1, 2, 3], [4, 5], ok)], pad_id=0)
    first, second = batch.split(1)
    assert first.trimmed()["input_ids"].tolist() == [[1, 2]]
    assert first.trimmed()["loss_mask"].shape == (1, 1)
    assert first.trimmed()["scores"].shape == (1,)  # per-row tensors are not columns
    assert second.trimmed()["input_ids"].shape == (1, 5)


def test_behaviour_logprobs_aligned_with_the_response_targets():
    ok = RewardResult(1.0, True)
    a, b = sample([1, 2], [3, 4, 5], ok), sample([6], [7], ok)
    a.logprobs, b.logprobs = [-0.1, -0.2, -0.3], [-0.4]
    batch = build_train_batch([a, b], pad_id=0)
    assert torch.allclose(batch["behav_logp"], torch.tensor([[0, -0.1, -0.2, -0.3], [-0.4, 0, 0, 0]]))
    b.logprobs = None  # an engine that did not return them: no tensor rather than a wrong one
    assert build_train_batch([a, b], pad_id=0).get("behav_logp") is None


def test_first_loss_column_and_the_target_aligned_view_from_it():
    ok = RewardResult(1.0, True)
    batch = build_train_batch([sample([1, 2, 3], [4, 5], ok), sample([6, 7], [8, 9, 10], ok)], pad_id=0)
    batch = batch.with_tensor("advantages", batch["loss_mask"] * torch.tensor([[1.0], [-1.0]]))
    # the second row's response starts earlier (target column 1): nothing before it needs logits
    assert batch["loss_mask"].tolist() == [[0, 0, 1, 1], [0, 1, 1, 1]]
    assert batch.first_loss_column() == 1
    view = batch.from_column(1)
    assert view["input_ids"].tolist() == batch["input_ids"].tolist()  # the model still reads the whole context
    assert view["loss_mask"].tolist() == [[0, 1, 1], [1, 1, 1]]
    assert view["advantages"].tolist() == [[0, 1, 1], [-1, -1, -1]]
    assert view["scores"].tolist() == batch["scores"].tolist()  # per-row tensors stay whole
    failed = RewardResult.failed("timeout", "slow")
    none_in_loss = build_train_batch([sample([1, 2], [3], failed)], pad_id=0)
    assert none_in_loss.first_loss_column() == 1  # the last column: a forward still needs one
