"""Which models `rlvr.eval` may score in one engine (rlvr/pipeline/eval_weights.py): those that differ only in
their weights and in how their files were written; anything the engine reads decides otherwise."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from rlvr.pipeline.eval_weights import engine_key, read_weights

CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "num_hidden_layers": 2, "vocab_size": 16,
          "torch_dtype": "float32", "transformers_version": "5.19.0"}


def model_dir(root, name, weight=1.0, config=CONFIG, tokenizer='{"model": {"vocab": {"a": 0}}}'):
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config, indent=2))
    (d / "tokenizer.json").write_text(tokenizer)
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": 2, "transformers_version": "5.19.0"}))
    save_file({"w": torch.full((2, 2), weight), "steps": torch.tensor([3])}, str(d / "model.safetensors"))
    return d


def test_weights_and_bookkeeping_do_not_count(tmp_path):
    a = model_dir(tmp_path, "a", weight=1.0)
    b = model_dir(tmp_path, "b", weight=2.0, config={**CONFIG, "torch_dtype": "bfloat16", "dtype": "bfloat16",
                                                     "transformers_version": "5.17.0", "use_cache": False})
    (b / "rlvr_export.json").write_text('{"run": "/elsewhere"}')
    (b / "README.md").write_text("a model card")
    (b / "training_args.bin").write_bytes(b"\x00\x01")
    reordered = json.dumps(dict(reversed(list(json.loads((b / "generation_config.json").read_text()).items()))))
    (b / "generation_config.json").write_text(reordered)
    assert engine_key(str(a)) == engine_key(str(b)) is not None


@pytest.mark.parametrize("change", ["architecture", "tokenizer", "generation_config", "chat_template", "missing"])
def test_anything_the_engine_reads_starts_a_new_one(tmp_path, change):
    a = model_dir(tmp_path, "a")
    b = model_dir(tmp_path, "b", config={**CONFIG, "num_hidden_layers": 3} if change == "architecture" else CONFIG,
                  tokenizer='{"model": {"vocab": {"b": 0}}}' if change == "tokenizer" else
                  '{"model": {"vocab": {"a": 0}}}')
    if change == "generation_config":
        (b / "generation_config.json").write_text(json.dumps({"eos_token_id": 7}))
    if change == "chat_template":
        (b / "chat_template.jinja").write_text("{{ messages }}")
    if change == "missing":
        (b / "generation_config.json").unlink()
    assert engine_key(str(a)) != engine_key(str(b))


def test_no_safetensors_no_shared_engine(tmp_path):
    a = model_dir(tmp_path, "a")
    (a / "model.safetensors").unlink()
    torch.save({"w": torch.ones(1)}, a / "pytorch_model.bin")
    assert engine_key(str(a)) is None
    assert engine_key(str(tmp_path / "nowhere")) is None
    assert engine_key("smollm2-135m-instruct-by-name") is None


def test_read_weights_casts_floating_tensors_to_the_engine_dtype(tmp_path):
    a = model_dir(tmp_path, "a", weight=1.5)
    save_file({"v": torch.ones(3)}, str(a / "model-00002.safetensors"))  # a second shard joins the first
    weights = read_weights(str(a), "bfloat16")
    assert set(weights) == {"w", "steps", "v"}
    assert weights["w"].dtype == torch.bfloat16 and weights["w"][0, 0].item() == 1.5
    assert weights["steps"].dtype == torch.int64  # integer tensors keep their type
