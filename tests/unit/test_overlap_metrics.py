from rlvr.config.load import config_from_dict
from rlvr.telemetry.overlap_metrics import merge_parts, overlap_metrics


def test_merge_parts_sums_counts_keeps_extremes_and_averages_the_rest():
    parts = [{"batch/samples": 4, "batch/staleness/max": 1, "batch/group_size/min": 2, "actor/loss": 1.0},
             {"batch/samples": 4, "batch/staleness/max": 0, "batch/group_size/min": 4, "actor/loss": 3.0}]
    assert merge_parts(parts) == {"batch/samples": 8, "batch/staleness/max": 1, "batch/group_size/min": 2,
                                  "actor/loss": 2.0}


def test_reward_floor_overlap_and_compute():
    reward = {"worker": "rlvr.workers.rewards.math_rule.MathRuleRewardWorker", "max_concurrency": 4}
    cfg = config_from_dict({"data": {"train_files": ["t.jsonl"]},
                            "domains": {"a": {"reward": reward}, "b": {"reward": {**reward, "max_concurrency": 2}}},
                            "rollout": {"domain_interleave_probs": {"a": 0.5, "b": 0.5}}})
    m = {"time/model_update": 1.0, "time/generate": 2.0, "time/train": 3.0, "time/reward_wait": 4.0,
         "time/val": 10.0, "a/scheduler/samples_generated": 16, "a/reward/latency/mean": 0.5,
         "b/scheduler/samples_generated": 8, "b/reward/latency/mean": 1.5, "a/timing/reward_span": 6.0,
         "b/timing/reward_span": 7.0, "a/reward/in_flight_peak": 4, "b/reward/in_flight_peak": 2,
         "batch/response_tokens": 100}
    out = overlap_metrics(m, cfg)
    assert out["timing/compute"] == 6.0  # val is not part of the step's critical path
    assert out["timing/reward_floor"] == max(16 * 0.5 / 4, 8 * 1.5 / 2)  # = 6: the slower domain's pool
    assert out["timing/overlap"] == 7.0 - 4.0  # reward time hidden behind compute
    assert out["reward/in_flight_peak"] == 6
    assert out["time/step"] == 20.0
    assert out["system/response_tokens_per_s"] == 50.0
