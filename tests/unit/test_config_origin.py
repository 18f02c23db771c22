"""--print-config: every resolved value with its origin (default, preset, file, override, derived)."""

from __future__ import annotations

import pytest
import yaml

from rlvr.config.load import load_config
from rlvr.config.origin import config_origins, field_default, leaf_paths, render_with_origins


@pytest.fixture
def config_file(tmp_path):
    tree = {"run": {"max_steps": 3},
            "data": {"train_files": ["t.jsonl"]},
            "domains": {"math": {"reward": {"worker": "rlvr.workers.rewards.math_rule.MathRuleRewardWorker",
                                            "args": {"pool_size": 1}}}},
            "algorithm": "dapo",
            "rollout": {"group_size": 8}}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def test_each_value_says_where_it_came_from(config_file):
    overrides = ["run.seed=7", "algorithm.clip_eps_high=0.3", "generation={max_new_tokens: 16}"]
    cfg = load_config(config_file, overrides)
    o = config_origins(config_file, overrides, cfg)
    assert o["run.max_steps"] == "file" and o["rollout.group_size"] == "file"
    assert o["domains.math.reward.args.pool_size"] == "file" and o["algorithm.preset"] == "file"
    assert o["run.seed"] == "override run.seed=7"
    assert o["algorithm.clip_eps_high"] == "override algorithm.clip_eps_high=0.3"
    assert o["generation.max_new_tokens"] == "override generation={max_new_tokens: 16}"  # a section-level override
    assert o["algorithm.overlong_shaping"] == "preset dapo"
    assert o["rollout.filter.zero_spread"] == "preset dapo"  # a preset's value outside `algorithm`
    assert o["run.output_dir"] == "default" and o["domains.math.reward.timeout_s"] == "default"
    assert o["actor_train.betas"] == "default"  # a tuple default compares equal to its dumped list
    assert o["run.name"] == "derived"  # from the file name
    assert o["rollout.domain_interleave_probs.math"] == "derived"  # the single domain's probability
    assert set(o) == set(leaf_paths(cfg.model_dump(mode="json")))


def test_field_defaults_walk_nested_sections_and_domain_maps():
    assert field_default("run.max_steps") == (True, 20)
    assert field_default("generation.vllm.kv_cache_gib") == (True, 1.0)
    assert field_default("domains.anything.reward.max_retries") == (True, 2)
    assert field_default("domains.anything.reward.worker") == (False, None)  # required
    assert field_default("data.train_files") == (False, None)


def test_rendered_config_is_yaml_with_origin_comments(config_file):
    cfg = load_config(config_file, ["run.seed=7"])
    text = render_with_origins(cfg, config_origins(config_file, ["run.seed=7"], cfg))
    lines = {line.split(":")[0].strip(): line for line in text.splitlines()}
    assert lines["seed"].split("#")[1].strip() == "override run.seed=7"
    assert lines["max_steps"].rstrip().endswith("# file")
    assert yaml.safe_load(text) == cfg.model_dump(mode="json")  # the comments do not change the YAML
