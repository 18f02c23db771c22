"""Config errors name the key and where it came from; presets expand; overrides parse as YAML."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlvr.config.base import ConfigError
from rlvr.config.load import load_config

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, tree: dict) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def base() -> dict:
    reward = {"worker": "rlvr.workers.rewards.math_rule.MathRuleRewardWorker"}
    return {"data": {"train_files": ["t.jsonl"]},
            "domains": {"a": {"reward": dict(reward)}, "b": {"reward": dict(reward)}},
            "rollout": {"domain_interleave_probs": {"a": 0.25, "b": 0.75}}}


def test_shipped_config_loads_and_names_the_run():
    cfg = load_config(REPO / "configs/math.yaml")
    assert cfg.run.name == "math"
    assert set(cfg.domains) == {"arithmetic", "word_problems"}
    assert cfg.algorithm.adv_estimator == "grpo"


def test_unknown_key_names_key_and_file(tmp_path):
    tree = base()
    tree["rollout"]["group_sise"] = 4
    path = write(tmp_path, tree)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}: rollout.group_sise: unknown key" in str(err.value)


def test_unknown_key_from_override_names_the_override(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, base()), ["actor_train.learning_rate=1e-5"])
    assert "override 'actor_train.learning_rate=1e-5': actor_train.learning_rate: unknown key" in str(err.value)


def test_wrong_type_names_key(tmp_path):
    tree = base()
    tree["rollout"]["group_size"] = "four"
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, tree))
    assert "rollout.group_size" in str(err.value) and "integer" in str(err.value)


@pytest.mark.parametrize("estimator,ok", [("grpo", False), ("rloo", False), ("dr_grpo", False),
                                          ("reinforce_pp_baseline", False), ("reinforce_pp", True), ("gae", True)])
def test_one_response_per_prompt_is_refused_where_the_estimator_compares_within_the_group(tmp_path, estimator, ok):
    tree = base()
    tree["rollout"]["group_size"] = 1
    tree["algorithm"] = {"adv_estimator": estimator}
    if ok:
        assert load_config(write(tmp_path, tree)).rollout.group_size == 1
        return
    with pytest.raises(ConfigError, match=rf"rollout\.group_size: 1: adv_estimator {estimator} compares .* every "
                                          "advantage is 0"):
        load_config(write(tmp_path, tree))


def test_probabilities_must_sum_to_one(tmp_path):
    tree = base()
    tree["rollout"]["domain_interleave_probs"] = {"a": 0.5, "b": 0.6}
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, tree))
    assert "rollout.domain_interleave_probs: probabilities must sum to 1, they sum to 1.1" in str(err.value)


@pytest.mark.parametrize("probs, fragment", [
    ({"a": 1.0}, "exactly the configured domains"),
    ({"a": -0.5, "b": 1.5}, "must be a finite number >= 0"),
])
def test_probabilities_cover_domains_and_are_non_negative(tmp_path, probs, fragment):
    tree = base()
    tree["rollout"]["domain_interleave_probs"] = probs
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, tree))
    assert "rollout.domain_interleave_probs" in str(err.value) and fragment in str(err.value)


def test_several_domains_need_probabilities(tmp_path):
    tree = base()
    del tree["rollout"]
    with pytest.raises(ConfigError, match="rollout.domain_interleave_probs: required with several domains"):
        load_config(write(tmp_path, tree))


def test_single_domain_defaults_to_probability_one(tmp_path):
    tree = base()
    del tree["domains"]["b"], tree["rollout"]
    assert load_config(write(tmp_path, tree)).rollout.domain_interleave_probs == {"a": 1.0}


def test_tag_map_must_point_to_a_domain(tmp_path):
    tree = base()
    tree["data"]["tag_to_domain"] = {"algebra": "c"}
    with pytest.raises(ConfigError, match="data.tag_to_domain.algebra: domain 'c' is not one of"):
        load_config(write(tmp_path, tree))


def test_mini_batch_must_divide_batch(tmp_path):
    with pytest.raises(ConfigError, match="actor_train.mini_batch_size: 5 must divide the batch of 32"):
        load_config(write(tmp_path, base()), ["actor_train.mini_batch_size=5"])


def test_preset_expands_and_user_keys_win(tmp_path):
    tree = base()
    tree["algorithm"] = "dr_grpo"
    cfg = load_config(write(tmp_path, tree), ["algorithm.clip_eps_high=0.28"])
    assert cfg.algorithm.preset == "dr_grpo"
    assert cfg.algorithm.norm_adv_by_std is False
    assert cfg.algorithm.loss_agg_mode == "seq-mean-token-sum-norm"
    assert cfg.algorithm.clip_eps_high == 0.28


def test_unknown_preset_lists_the_known_ones(tmp_path):
    with pytest.raises(ConfigError, match="unknown algorithm preset 'ppo2'; known presets: dapo, dr_grpo, gigpo, grpo, gspo, "
                                          "multi_step_grpo, ppo, reinforce, reinforce_pp"):
        load_config(write(tmp_path, base()), ["algorithm=ppo2"])


def test_overrides_parse_values_as_yaml(tmp_path):
    cfg = load_config(write(tmp_path, base()), ["run.max_steps=3", "data.val_files=[v1.jsonl, v2.jsonl]",
                                                "actor_train.bf16_autocast=false"])
    assert cfg.run.max_steps == 3
    assert cfg.data.val_files == ["v1.jsonl", "v2.jsonl"]
    assert cfg.actor_train.bf16_autocast is False


@pytest.mark.parametrize("bad", ["max_steps", "=3", "run.max_steps.x=1"])
def test_malformed_overrides(tmp_path, bad):
    with pytest.raises(ConfigError):
        load_config(write(tmp_path, base()), [bad])


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("run: [unclosed")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(bad)


def test_mini_batch_pipeline_needs_whole_groups_per_mini_batch(tmp_path):
    path = write(tmp_path, base())
    with pytest.raises(ConfigError, match="actor_train.mini_batch_size: overlap.mini_batch_pipeline .* "
                                          "multiple of rollout.group_size=4, got None"):
        load_config(path, ["overlap.mini_batch_pipeline=true"])
    with pytest.raises(ConfigError, match="got 2"):
        load_config(path, ["overlap.mini_batch_pipeline=true", "actor_train.mini_batch_size=2"])
    with pytest.raises(ConfigError, match="actor_train.ppo_epochs"):
        load_config(path, ["overlap.mini_batch_pipeline=true", "actor_train.mini_batch_size=8",
                           "actor_train.ppo_epochs=2"])
    with pytest.raises(ConfigError, match="algorithm.adv_estimator: reinforce_pp_baseline whitens"):
        load_config(path, ["overlap.mini_batch_pipeline=true", "actor_train.mini_batch_size=8",
                           "algorithm.adv_estimator=reinforce_pp_baseline"])
    cfg = load_config(path, ["overlap.mini_batch_pipeline=true", "actor_train.mini_batch_size=8"])
    assert cfg.generation.return_logprobs  # the behaviour logprobs anchor the later mini-batches


def test_off_policy_and_decoupled_loss_turn_on_behaviour_logprobs(tmp_path):
    path = write(tmp_path, base())
    assert not load_config(path).generation.return_logprobs
    assert load_config(path, ["overlap.one_step_off_policy=true"]).generation.return_logprobs
    assert load_config(path, ["algorithm.decoupled_loss=true"]).generation.return_logprobs


# ---------------------------------------------------------------- critic, KL control, reward processing, presets


@pytest.mark.parametrize("override,key", [("algorithm.gamma=1.5", "algorithm.gamma"),
                                          ("algorithm.gamma=-0.1", "algorithm.gamma"),
                                          ("algorithm.lam=1.01", "algorithm.lam"),
                                          ("algorithm.lam=-1", "algorithm.lam")])
def test_gamma_and_lambda_must_lie_in_0_1(tmp_path, override, key):
    with pytest.raises(ConfigError, match=f"override '{override}': {key}: Input should be"):
        load_config(write(tmp_path, base()), ["algorithm=ppo", override])


def test_critic_model_path_must_exist(tmp_path):
    with pytest.raises(ConfigError, match="critic.model_path: '/no/such/critic' does not exist"):
        load_config(write(tmp_path, base()), ["algorithm=ppo", "critic.model_path=/no/such/critic"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="critic.model_path: .* has no config.json"):
        load_config(write(tmp_path, base()), ["algorithm=ppo", f"critic.model_path={tmp_path / 'empty'}"])


def test_critic_warmup_must_leave_actor_steps(tmp_path):
    path = write(tmp_path, base())
    with pytest.raises(ConfigError, match="critic.critic_warmup: 3 warm-up steps leave no step of "
                                          "run.max_steps=3 for the actor"):
        load_config(path, ["algorithm=ppo", "run.max_steps=3", "critic.critic_warmup=3"])
    assert load_config(path, ["algorithm=ppo", "run.max_steps=3", "critic.critic_warmup=2"]).critic.critic_warmup == 2


def test_a_kl_controller_needs_a_kl_in_the_reward(tmp_path):
    with pytest.raises(ConfigError, match="algorithm.kl_ctrl.type: an adaptive KL controller acts on the KL in the "
                                          "reward, which is off"):
        load_config(write(tmp_path, base()), ["algorithm.kl_ctrl.type=adaptive"])
    # ppo's KL is in the reward: an adaptive controller is fine, and turning the KL off keeps a fixed one quiet
    cfg = load_config(write(tmp_path, base()), ["algorithm=ppo", "algorithm.kl_ctrl.type=adaptive"])
    assert cfg.needs_reference and cfg.algorithm.kl_ctrl.kl_coef == 0.001  # the preset's coefficient stays
    assert not load_config(write(tmp_path, base()), ["algorithm=ppo", "algorithm.use_kl_in_reward=false"]
                           ).needs_reference


def test_reference_and_critic_start_only_when_needed(tmp_path):
    path = write(tmp_path, base())
    grpo = load_config(path)
    assert not grpo.needs_reference and not grpo.algorithm.needs_critic
    assert load_config(path, ["algorithm.kl_loss_coef=0.1"]).needs_reference
    ppo = load_config(path, ["algorithm=ppo"])
    assert ppo.needs_reference and ppo.algorithm.needs_critic
    assert load_config(path, ["algorithm=reinforce_pp"]).needs_reference


def test_reward_processing_per_domain_over_the_algorithm_defaults(tmp_path):
    tree = base()
    tree["algorithm"] = {"preset": "grpo", "reward_processing": {"reward_clip": 2.0, "norm_mean_type": "running"}}
    tree["domains"]["b"]["reward_processing"] = {"reward_weight": 0.5, "norm_mean_type": "none"}
    cfg = load_config(write(tmp_path, tree))
    a, b = cfg.reward_processing("a"), cfg.reward_processing("b")
    assert (a.reward_clip, a.norm_mean_type, a.reward_weight) == (2.0, "running", 1.0)
    assert (b.reward_clip, b.norm_mean_type, b.reward_weight) == (2.0, "none", 0.5)
    tree["domains"]["b"]["reward_processing"] = {"reward_wieght": 0.5}
    with pytest.raises(ConfigError, match="domains.b.reward_processing.reward_wieght: unknown key"):
        load_config(write(tmp_path, tree))
    tree["domains"]["b"]["reward_processing"] = {"norm_std_type": "median"}
    with pytest.raises(ConfigError, match="domains.b.reward_processing.norm_std_type: Input should be"):
        load_config(write(tmp_path, tree))


def test_whole_batch_statistics_are_refused_with_the_mini_batch_pipeline(tmp_path):
    path = write(tmp_path, base())
    pipeline = ["overlap.mini_batch_pipeline=true", "actor_train.mini_batch_size=8"]
    for preset in ("ppo", "reinforce_pp", "reinforce", "topr"):
        with pytest.raises(ConfigError, match="algorithm.adv_estimator: .* overlap.mini_batch_pipeline"):
            load_config(path, [f"algorithm={preset}", *pipeline])
    with pytest.raises(ConfigError, match="algorithm.reward_processing.norm_std_type: batch normalisation"):
        load_config(path, [*pipeline, "algorithm.reward_processing.norm_std_type=batch"])
    load_config(path, ["algorithm=gspo", *pipeline, "algorithm.reward_processing.norm_mean_type=running"])


def test_new_presets(tmp_path):
    path = write(tmp_path, base())
    ppo = load_config(path, ["algorithm=ppo"]).algorithm
    assert (ppo.adv_estimator, ppo.gamma, ppo.lam, ppo.use_kl_in_reward, ppo.kl_penalty) == ("gae", 1.0, 0.95,
                                                                                              True, "k1")
    gspo = load_config(path, ["algorithm=gspo"]).algorithm
    assert (gspo.policy_loss, gspo.clip_eps_low, gspo.clip_eps_high, gspo.loss_agg_mode) == (
        "gspo", 3e-4, 4e-4, "seq-mean-token-mean")
    topr = load_config(path, ["algorithm=topr"]).algorithm
    assert (topr.policy_loss, topr.adv_estimator) == ("topr", "reinforce")
    rpp = load_config(path, ["algorithm=reinforce_pp"]).algorithm
    assert (rpp.adv_estimator, rpp.use_kl_in_reward, rpp.kl_ctrl.kl_coef) == ("reinforce_pp", True, 0.01)
    assert load_config(path, ["algorithm=reinforce_pp_baseline"]).algorithm.adv_estimator == "reinforce_pp_baseline"
    with pytest.raises(ConfigError, match="algorithm.dual_clip_c: the dual clip is part of policy_loss: ppo"):
        load_config(path, ["algorithm=gspo", "algorithm.dual_clip_c=3"])
