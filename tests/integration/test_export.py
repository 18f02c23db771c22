"""`python -m rlvr.export`: a run's checkpoint as a Hugging Face directory that transformers and vLLM load and
generate with unchanged, holding exactly the trained weights (not the base model's), the base model's tokenizer
and chat template, and where it came from; every mistake a one-line error with exit 2.

The "run" is built here the way a checkpoint is written (actor_train/model through the strategies' exporter,
driver.json, config.yaml naming the base model), from the tiny test models with every weight moved, so that a
copy of the base model would fail the weight check."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
import yaml

from rlvr.backends.train_strategy import export_causal_lm
from rlvr.backends.vllm_engine import vllm_available
from rlvr.cli.export import main
from rlvr.data.types import SamplingParams


def make_run(tmp_path: Path, base_model: str, steps=(2, 4)) -> tuple[Path, dict[int, dict[str, torch.Tensor]]]:
    """A run directory with a checkpoint per step in `steps`; returns it and each step's weights."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32)
    run = tmp_path / "runs" / "math-20261126-000000-000"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"model": {"path": base_model}}))
    saved = {}
    for step in steps:
        ckpt = run / "checkpoints" / f"step_{step:06d}"
        weights = {name: p.detach() + 0.01 * step for name, p in model.named_parameters()}
        export_causal_lm(weights, model.config, ckpt / "actor_train" / "model")
        (ckpt / "driver.json").write_text(json.dumps({"step": step}))
        (ckpt / "config.yaml").write_text((run / "config.yaml").read_text())
        saved[step] = weights
    return run, saved


def test_export_holds_the_trained_weights_and_the_chat_template(tiny_model_dir, tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run, saved = make_run(tmp_path, tiny_model_dir)
    assert main([str(run), "--out", str(tmp_path / "latest")]) == 0
    assert main([str(run), "--step", "2", "--out", str(tmp_path / "two")]) == 0
    assert main([str(run / "checkpoints" / "step_000002"), "--out", str(tmp_path / "by-dir"),
                 "--dtype", "bfloat16"]) == 0
    assert "exported" in capsys.readouterr().out
    for out, step, dtype in (("latest", 4, torch.float32), ("two", 2, torch.float32), ("by-dir", 2, torch.bfloat16)):
        model = AutoModelForCausalLM.from_pretrained(tmp_path / out)
        assert model.dtype == dtype, out
        params = dict(model.named_parameters())
        for name, w in saved[step].items():
            assert torch.equal(params[name].detach(), w.to(dtype)), (out, name)
        provenance = json.loads((tmp_path / out / "rlvr_export.json").read_text())
        assert provenance["step"] == step and provenance["base_model"] == tiny_model_dir
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "latest")
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "2+2?"}], add_generation_prompt=True,
                                        return_dict=False)
    assert ids == AutoTokenizer.from_pretrained(tiny_model_dir).apply_chat_template(
        [{"role": "user", "content": "2+2?"}], add_generation_prompt=True, return_dict=False)
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "latest")
    out = model.generate(torch.tensor([ids]), max_new_tokens=4, do_sample=False)
    assert out.shape[1] == len(ids) + 4 or out[0, -1].item() in model.generation_config.eos_token_id


@pytest.mark.parametrize("case, expected", [
    ("no_run", "no such run directory"),
    ("no_checkpoint", "no checkpoint (was the run started with run.save_every > 0?)"),
    ("bad_step", "no checkpoint of step 3 (there are: 2, 4)"),
    ("step_of_a_checkpoint", "is a checkpoint directory already: leave out --step"),
    ("out_not_empty", "exists and is not empty"),
    ("base_gone", "the run's base model (for its tokenizer) is not found"),
])
def test_export_mistakes_are_one_line_errors(tiny_model_dir, tmp_path, capsys, case, expected):
    run, _ = make_run(tmp_path, tiny_model_dir)
    capsys.readouterr()  # transformers' progress bars while the run was made
    out = tmp_path / "out"
    args = {"no_run": [str(tmp_path / "nope")], "no_checkpoint": [str(run.parent)],
            "bad_step": [str(run), "--step", "3"],
            "step_of_a_checkpoint": [str(run / "checkpoints" / "step_000002"), "--step", "2"],
            "out_not_empty": [str(run)], "base_gone": [str(run)]}[case]
    if case == "out_not_empty":
        out.mkdir()
        (out / "x").write_text("")
    if case == "base_gone":
        (run / "checkpoints" / "step_000004" / "config.yaml").write_text(
            yaml.safe_dump({"model": {"path": str(tmp_path / "moved")}}))
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and expected in err[0], err
    if case != "out_not_empty":
        assert not out.exists()


@pytest.mark.slow
@pytest.mark.skipif(not vllm_available(), reason="vllm is not importable (scripts/setup.sh installs it)")
def test_vllm_generates_with_the_exported_model_as_transformers_does(tiny_vllm_model_dir, tmp_path):
    """vLLM serves the export as it is (no rlvr weight loading): its greedy tokens are transformers' greedy tokens
    on the same directory."""
    from transformers import AutoModelForCausalLM

    from rlvr.backends.vllm_engine import VLLMEngine

    run, _ = make_run(tmp_path, tiny_vllm_model_dir, steps=(2,))
    out = tmp_path / "export"
    assert main([str(run), "--out", str(out)]) == 0
    prompt = [1, 5, 9, 14, 3]
    expected = AutoModelForCausalLM.from_pretrained(out).generate(
        torch.tensor([prompt]), max_new_tokens=6, do_sample=False)[0, len(prompt):].tolist()
    engine = VLLMEngine(str(out), dtype="float32", max_model_len=128, kv_cache_gib=0.1)
    try:
        got = asyncio.run(engine.generate(prompt, 1, SamplingParams(max_new_tokens=6, temperature=0.0)))
    finally:
        engine.shutdown()
    assert got[0].token_ids == expected
