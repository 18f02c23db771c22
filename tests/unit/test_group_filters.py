from rlvr.data.reward_result import RewardResult
from rlvr.data.types import Group, Prompt, Sample
from rlvr.schedulers.group_filters import FilterSettings, drop_reason


def group(rewards, correct=None, failed=()):
    p = Prompt(uid="u", domain="d", ground_truth="1")
    samples = []
    for i, r in enumerate(rewards):
        result = (RewardResult.failed("error", "x") if i in failed
                  else RewardResult(r, None if correct is None else bool(correct[i])))
        samples.append(Sample(p, "g", i, [1], "", "stop", 0, reward=result))
    return Group("g", p, samples)


def test_zero_spread_reasons():
    s = FilterSettings(zero_spread=True)
    assert drop_reason(group([1, 1], [1, 1]), s) == "all_correct"
    assert drop_reason(group([0, 0], [0, 0]), s) == "all_wrong"
    assert drop_reason(group([0.5, 0.5]), s) == "zero_spread"
    assert drop_reason(group([1, 0], [1, 0]), s) is None


def test_threshold_and_metric():
    # rewards differ a little (shaping) but correctness is the same: dropped on "correct", kept on "reward"
    g = group([1.0, 0.9], [1, 1])
    assert drop_reason(g, FilterSettings(zero_spread=True, metric="correct")) == "all_correct"
    assert drop_reason(g, FilterSettings(zero_spread=True)) is None
    assert drop_reason(g, FilterSettings(zero_spread=True, zero_spread_threshold=0.06)) == "all_correct"


def test_failed_samples_do_not_count():
    s = FilterSettings(zero_spread=True, min_valid=2)
    assert drop_reason(group([1, 0, 0], [1, 0, 0], failed={1, 2}), s) == "too_few_valid"
    assert drop_reason(group([1, 0, 1], [1, 0, 1], failed={1}), s) == "all_correct"  # the failed one is ignored


def test_band_and_filters_off():
    assert drop_reason(group([1, 1, 1, 0]), FilterSettings(mean_band=(0.0, 0.5))) == "band"
    assert drop_reason(group([1, 1]), FilterSettings()) is None
