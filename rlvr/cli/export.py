"""`python -m rlvr.export RUN [--step N|latest] --out DIR`: a checkpoint as a plain Hugging Face model directory.

What comes out is what transformers' `from_pretrained` and vLLM load unchanged: config.json and model.safetensors
(the trained weights as the checkpoint holds them, fp32 masters, or bf16 with `--dtype bfloat16`), the base
model's tokenizer with its chat template, its generation config, and `rlvr_export.json` saying which run and
step it came from. A LoRA run's checkpoint (actor_train/adapter/) is merged into the run's base model. RUN is a run directory (`runs/<name>-<time>`) or one of its checkpoint directories.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

WEIGHTS = "model.safetensors"


class ExportError(ValueError):
    """What the user asked for cannot be exported (said in one line)."""


def checkpoint_of(run: Path, step: str) -> Path:
    """The checkpoint directory: RUN itself when it is one, else RUN's step `step` (a number, or `latest`)."""
    from rlvr.pipeline.checkpoint import list_checkpoints, step_dir

    if (run / "driver.json").exists():
        if step != "latest":
            raise ExportError(f"{run} is a checkpoint directory already: leave out --step")
        return run
    if not run.is_dir():
        raise ExportError(f"{run}: no such run directory")
    checkpoints = list_checkpoints(run)
    if not checkpoints:
        raise ExportError(f"{run}: no checkpoint (was the run started with run.save_every > 0?)")
    if step == "latest":
        return checkpoints[-1]
    if not step.isdigit() or step_dir(run, int(step)) not in checkpoints:
        have = ", ".join(str(int(c.name.removeprefix("step_"))) for c in checkpoints)
        raise ExportError(f"{run}: no checkpoint of step {step} (there are: {have})")
    return step_dir(run, int(step))


def base_model_of(checkpoint: Path) -> str:
    """The directory of the model the run started from (its tokenizer and generation config go with the export)."""
    import yaml

    from rlvr.models.default_model import ModelNotFoundError, resolve_model_path

    model = (yaml.safe_load((checkpoint / "config.yaml").read_text()) or {}).get("model", {})
    try:
        return resolve_model_path(model["path"], model.get("cache_dir"))
    except (KeyError, ModelNotFoundError) as err:
        raise ExportError(f"{checkpoint / 'config.yaml'}: the run's base model (for its tokenizer) is not found: "
                          f"{err}") from None


def merged_base(base: str, adapter_dir: Path) -> dict:
    """The base model's weights (fp32, tied ones once) with the checkpoint's adapters merged in."""
    from rlvr.backends.lora import merge_saved_adapter
    from rlvr.backends.train_strategy import load_causal_lm

    model = load_causal_lm(base)
    return merge_saved_adapter({k: p.detach() for k, p in model.named_parameters()}, adapter_dir)


def export(checkpoint: Path, out: Path, dtype: str | None = None) -> Path:
    """Writes the Hugging Face directory `out` (which must not exist, or be empty) from `checkpoint`."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer, GenerationConfig

    from rlvr.backends.lora import ADAPTER_DIR, ADAPTER_WEIGHTS

    model_dir = checkpoint / "actor_train" / "model"
    adapter_dir = checkpoint / "actor_train" / ADAPTER_DIR
    lora = (adapter_dir / ADAPTER_WEIGHTS).exists()
    if not lora and not (model_dir / WEIGHTS).exists():
        raise ExportError(f"{checkpoint}: no actor_train/model/{WEIGHTS} nor actor_train/{ADAPTER_DIR}/"
                          f"{ADAPTER_WEIGHTS} (an incomplete checkpoint?)")
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"--out {out}: exists and is not empty")
    base = base_model_of(checkpoint)
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads(((Path(base) if lora else model_dir) / "config.json").read_text())
    if lora:  # the adapters merged into the run's base model: a plain model, nothing left to merge
        weights = merged_base(base, adapter_dir)
        config["torch_dtype"] = config["dtype"] = "float32"
    elif dtype is None:
        shutil.copyfile(model_dir / WEIGHTS, out / WEIGHTS)
        weights = None
    else:
        weights = load_file(str(model_dir / WEIGHTS))
    if weights is not None:
        if dtype is not None:
            weights = {k: v.to(getattr(torch, dtype)) for k, v in weights.items()}
            config["torch_dtype"] = config["dtype"] = dtype
        save_file({k: v.contiguous() for k, v in weights.items()}, str(out / WEIGHTS), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    AutoTokenizer.from_pretrained(base).save_pretrained(out)  # the chat template goes with it
    try:
        GenerationConfig.from_pretrained(base).save_pretrained(out)
    except OSError:
        pass  # the base model has none: transformers and vLLM then use the model config's defaults
    driver = json.loads((checkpoint / "driver.json").read_text())
    (out / "rlvr_export.json").write_text(json.dumps({
        "run": str(checkpoint.parent.parent.resolve()), "checkpoint": str(checkpoint.resolve()),
        "step": driver.get("step"), "base_model": base,
        "dtype": dtype or config.get("dtype") or config.get("torch_dtype")}, indent=1))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlvr.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a run directory (runs/<name>-<time>) or one of its checkpoint directories")
    parser.add_argument("--step", default="latest", help="the checkpoint's step number, or latest (default)")
    parser.add_argument("--out", required=True, help="the directory to write (must not exist, or be empty)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                        help="store the weights in this type (default: as the checkpoint holds them, fp32)")
    args = parser.parse_args(argv)
    try:
        checkpoint = checkpoint_of(Path(args.run), args.step)
        out = export(checkpoint, Path(args.out), args.dtype)
    except ExportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from rlvr.report.summary import human_bytes, size_bytes

    print(f"exported {checkpoint} -> {out} ({human_bytes(size_bytes(out))})")
    return 0
