"""Shared fixtures: the default model's tokenizer, a tiny random model built from a config, one local Ray."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


QUICK_TIERS = ("unit", "contract")  # tests/README.md: tiers 1-2, `pytest -m quick`


def pytest_collection_modifyitems(config, items):
    """Unit and contract tests not marked `slow` are `quick` (the inner loop: `pytest -m quick`). Tests marked
    `gpu` run only where torch sees a CUDA device."""
    for item in items:
        parts = Path(str(item.fspath)).relative_to(REPO).parts
        if len(parts) > 1 and parts[0] == "tests" and parts[1] in QUICK_TIERS and "slow" not in item.keywords:
            item.add_marker(pytest.mark.quick)
    gpu_tests = [item for item in items if "gpu" in item.keywords]
    if not gpu_tests:
        return
    import torch

    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA device (marker gpu)")
        for item in gpu_tests:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def default_model_dir() -> str:
    from rlvr.models.default_model import ensure_default_model

    return ensure_default_model()


@pytest.fixture(scope="session")
def tiny_model_dir(default_model_dir, tmp_path_factory) -> str:
    """A 2-layer Llama with random weights and the default model's tokenizer and chat template."""
    from rlvr.models.tiny_model import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny-model"), default_model_dir)


@pytest.fixture(scope="session")
def tiny_vllm_model_dir(tiny_model_dir, tmp_path_factory) -> str:
    """`tiny_model_dir` with head_dim 32 (2 query heads, 1 KV head): vLLM's CPU attention needs head sizes of 32 to
    512, the tiny model's are 16. Same tokenizer, chat template and generation config."""
    import torch
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig, LlamaForCausalLM

    config = AutoConfig.from_pretrained(tiny_model_dir)
    config.num_attention_heads, config.num_key_value_heads, config.head_dim = 2, 1, config.hidden_size // 2
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny-vllm-model")
    LlamaForCausalLM(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    GenerationConfig.from_pretrained(tiny_model_dir).save_pretrained(out)
    return str(out)


@pytest.fixture(scope="session")
def ray_local():
    import ray

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # address="local": a cluster of its own even where another session's `ray start` cluster is up
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}})
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def finished_cli_run(tiny_model_dir, tmp_path_factory):
    """One uninterrupted CLI run of the tiny model (tests/lifecycle/cli_runs.py FINISHED: 3 steps, validation at
    0, 2 and 3, a checkpoint after every step), shared by the tests that need a finished run as a user leaves one:
    the crash-exact resume test compares its steps with a killed and resumed run's, the eval test scores its last
    checkpoint. A CLI run is ~25 s of the suite; each of them ran its own before."""
    from tests.lifecycle.cli_runs import finished_run

    return finished_run(tmp_path_factory.mktemp("finished-run"), tiny_model_dir)


def tiny_config(model_dir: str, output_dir: str, **sections) -> dict:
    """A small two-domain config over the shipped data; `sections` update the defaults section by section."""
    reward = {"worker": "rlvr.workers.rewards.math_rule.MathRuleRewardWorker", "timeout_s": 20,
              "args": {"answer_fallback": "last_number", "pool_size": 1}}
    tree = {
        "run": {"max_steps": 2, "eval_every": 1, "save_every": 0, "output_dir": output_dir, "name": "tiny",
                "progress_bar": False},
        "trackers": {"wandb": False, "tensorboard": False, "jsonl": True},
        "model": {"path": model_dir},
        "data": {"train_files": [str(REPO / "data/math/train.jsonl")],
                 "val_files": [str(REPO / "data/math/val.jsonl")]},
        "domains": {"arithmetic": {"reward": dict(reward)}, "word_problems": {"reward": dict(reward)}},
        "rollout": {"prompts_per_step": 4, "group_size": 2,
                    "domain_interleave_probs": {"arithmetic": 0.5, "word_problems": 0.5}},
        "generation": {"max_new_tokens": 12, "temperature": 1.0},
        "validation": {"max_prompts_per_domain": 4},
        "actor_train": {"lr": 1e-2, "micro_batch_size": 4, "bf16_autocast": False},
        "algorithm": {"preset": "grpo", "entropy_coef": 0.01},
    }
    for section, values in sections.items():
        tree[section] = {**tree.get(section, {}), **values} if isinstance(values, dict) else values
    return tree
