"""The three overlap switches (mini-batch pipeline, one-step off-policy, streaming rewards) in every combination,
on local Ray with the tiny model and a reward with injected latency; and reward failures inside the agent.

The combinations run one after another on one build's clusters (tests/helpers/shared_clusters.py: the switches
are the driver's and the schedulers' business), each from step 0; the rewind is checked here too."""

from __future__ import annotations

import itertools

import pytest

from tests.conftest import tiny_config
from tests.helpers.shared_clusters import SharedClusters
from tests.integration.test_pipeline import ran, read_metrics, run_pipeline

pytestmark = pytest.mark.slow

STEPS, PROMPTS, GROUP = 3, 4, 2


def overlap_tree(model_dir, out, pipeline, off_policy, streaming, reward=None):
    latency = {"worker": "tests.helpers.rewards.LatencyRewardForTest", "max_concurrency": 4, "timeout_s": 10,
               "args": {"max_latency_s": 0.2}}
    tree = tiny_config(model_dir, out, run={"max_steps": STEPS, "eval_every": 0},
                       rollout={"prompts_per_step": PROMPTS, "group_size": GROUP},
                       actor_train={"mini_batch_size": 4, "warmup_steps": STEPS},
                       overlap={"mini_batch_pipeline": pipeline, "one_step_off_policy": off_policy,
                                "streaming_rewards": streaming})
    tree["domains"] = {d: {"reward": dict(reward or latency)} for d in ("arithmetic", "word_problems")}
    return tree


@pytest.fixture(scope="module")
def shared(tiny_model_dir, ray_local, tmp_path_factory):
    clusters = SharedClusters(overlap_tree(tiny_model_dir, str(tmp_path_factory.mktemp("overlap-build")), False,
                                           False, False), tmp_path_factory.mktemp("overlap-start"))
    yield clusters
    clusters.close()


@pytest.mark.parametrize("pipeline, off_policy, streaming", list(itertools.product([False, True], repeat=3)))
def test_every_combination_trains_whole_groups_with_the_right_staleness(tiny_model_dir, shared, tmp_path,
                                                                          pipeline, off_policy, streaming):
    run = ran(shared.pipeline(overlap_tree(tiny_model_dir, str(tmp_path), pipeline, off_policy, streaming)))
    try:
        records = [r for r in read_metrics(run.run_dir) if "actor/loss" in r]
        assert [r["step"] for r in records] == list(range(STEPS))
        lr = 1e-2  # tiny_config's; warmup over STEPS steps: the schedule moved once per global step
        for r in records:
            step = r["step"]
            assert r["batch/samples"] == PROMPTS * GROUP  # same samples trained per step in every mode
            assert r["batch/groups"] == PROMPTS  # ... as whole groups
            assert r["batch/group_size/min"] == r["batch/group_size/max"] == GROUP
            assert r["actor/updates"] == 2  # two mini-batches of 4 sequences, pipelined or not
            assert r["actor/lr"] == pytest.approx(lr * (step + 1) / STEPS)
            expected = 1.0 if off_policy and step > 0 else 0.0
            assert r["batch/staleness/max"] == expected and r["batch/staleness/mean"] == expected
            assert r["timing/reward_floor"] > 0 and r["timing/reward_span"] > 0
            assert 0 <= r["timing/overlap"] <= r["timing/reward_span"]
            assert r["reward/in_flight_peak"] >= 1
            statuses = sum(r[f"{d}/reward/status/ok"] for d in ("arithmetic", "word_problems"))
            assert statuses == PROMPTS * GROUP
    finally:
        run.close()


def test_a_run_on_the_shared_clusters_starts_where_the_build_left_them(tiny_model_dir, shared, tmp_path):
    """The same config before and after another run on the same clusters: the same losses, LR and reward calls,
    step by step: actor_train's weights, optimizer, LR schedule and RNG rewound (without the rewind the LR differs).
    A fresh build of this config gave the same losses when this was written; that build is what the sharing saves."""
    def trained(name: str, *switches: bool) -> list[tuple]:
        run = ran(shared.pipeline(overlap_tree(tiny_model_dir, str(tmp_path / name), *switches)))
        run.close()
        return [(r["step"], r["actor/loss"], r["actor/lr"], r["arithmetic/reward/calls"])
                for r in read_metrics(run.run_dir) if "actor/loss" in r]

    first = trained("first", False, False, False)
    trained("between", True, True, True)
    assert trained("again", False, False, False) == first
    with pytest.raises(ValueError, match="differs from the shared build's"):
        shared.pipeline(overlap_tree(tiny_model_dir, str(tmp_path / "other"), False, False, False,
                                     reward={"worker": "tests.helpers.rewards.FailingEveryOtherRewardForTest"}))


def test_reward_that_raises_or_hangs_inside_the_agent_is_counted_never_stuck(tiny_model_dir, ray_local, tmp_path):
    failing = {"worker": "tests.helpers.rewards.FailingEveryOtherRewardForTest", "timeout_s": 1.0,
               "max_retries": 0}
    tree = overlap_tree(tiny_model_dir, str(tmp_path), True, True, True, reward=failing)
    tree["rollout"]["group_size"] = 4
    tree["actor_train"]["mini_batch_size"] = 8
    run = run_pipeline(tree)
    try:
        records = [r for r in read_metrics(run.run_dir) if "batch/samples" in r]
        assert [r["step"] for r in records] == list(range(STEPS))
        for r in records:
            counts = {s: sum(r[f"{d}/reward/status/{s}"] for d in ("arithmetic", "word_problems"))
                      for s in ("ok", "error", "timeout")}
            assert counts == {"ok": 4, "error": 8, "timeout": 4}  # per group of 4: index 1, 3 raise, 2 hangs
            assert r["batch/masked_samples"] == 12 and r["batch/samples"] == 16
    finally:
        run.close()
