"""Shared fixtures: the default model's tokenizer, a tiny random model built from a config, one local Ray."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def default_model_dir() -> str:
    from rlvr.models.default_model import ensure_default_model

    return ensure_default_model()


@pytest.fixture(scope="session")
def tiny_model_dir(default_model_dir, tmp_path_factory) -> str:
    """A 2-layer Llama with random weights and the default model's tokenizer and chat template."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    model = LlamaForCausalLM(config)
    out = tmp_path_factory.mktemp("tiny-model")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    GenerationConfig(eos_token_id=[im_end, tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id
                     ).save_pretrained(out)
    return str(out)


@pytest.fixture(scope="session")
def ray_local():
    import ray

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}})
    yield ray
    ray.shutdown()


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
