"""Low-rank adapters (LoRA, through peft) on a trained model, and the pure functions around them.

The adapters are injected into the model itself (`peft.inject_adapter_in_model`), not wrapped in a `PeftModel`:
the model keeps its class, so transformers' `logits_to_keep` (lm_head only where the loss looks) and the value
model's forward work as without adapters. Parameter names gain peft's parts: a targeted layer `X` holds
`X.base_layer.weight` (frozen) and `X.lora_A.default.weight`, `X.lora_B.default.weight` (trained).

What leaves the trainer is always in the base model's names:
  * `merged_weights`: W + (alpha / rank) B A for each adapted layer, every other weight as it is: what the
    inference engines load after each step and what `rlvr.export` writes (a plain model, nothing to merge later);
  * `adapter_state`: the trained tensors only, keyed as peft saves adapters (`base_model.model.<name>` without the
    adapter's name), so `peft.PeftModel.from_pretrained(base, <checkpoint>/adapter)` loads a checkpoint's adapter.

The reference policy of a KL term is the same model with its adapters switched off (`adapters_disabled`): no
second copy of the weights.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from rlvr.config.trainer import LoraConfig

ADAPTER = "default"  # peft's name for the one adapter
ADAPTER_DIR = "adapter"  # in a trainer's checkpoint directory, in place of model/
ADAPTER_WEIGHTS = "adapter_model.safetensors"  # peft's file names, so peft reads the directory as it is
ADAPTER_CONFIG = "adapter_config.json"
PEFT_PREFIX = "base_model.model."
_BASE, _A, _B = ".base_layer.", f".lora_A.{ADAPTER}.", f".lora_B.{ADAPTER}."


def add_lora(model: torch.nn.Module, cfg: LoraConfig, also_trained: Iterable[str] = ()) -> torch.nn.Module:
    """`model` with adapters on `cfg.target_modules`, every weight frozen but the adapters and the parameters
    whose name starts with one of `also_trained` (a value head, new and not a low-rank change of anything)."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import inject_adapter_in_model

    peft_cfg = PeftLoraConfig(r=cfg.rank, lora_alpha=cfg.rank * cfg.scale, lora_dropout=cfg.dropout,
                              target_modules=list(cfg.target_modules), bias="none")
    try:
        model = inject_adapter_in_model(peft_cfg, model, adapter_name=ADAPTER)
    except ValueError as err:  # peft: "Target modules {...} not found in the base model"
        raise ValueError(f"lora.target_modules {list(cfg.target_modules)}: {err}") from None
    also = tuple(also_trained)
    for name, p in model.named_parameters():
        p.requires_grad_(is_adapter(name) or name.startswith(also))
    model.peft_lora_config = peft_cfg  # for the adapter's config file
    return model


def is_adapter(name: str) -> bool:
    return _A in name or _B in name


@contextmanager
def adapters_disabled(model: torch.nn.Module) -> Iterator[None]:
    """The base model's forward within: every adapter layer passes its input to the frozen layer only."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)


def merged_weights(named: dict[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """Full weights in the base model's names from a LoRA model's named tensors: each adapted layer's
    W + scale * B @ A (computed in fp32, returned in W's dtype), every other tensor unchanged."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in named.items():
        if is_adapter(name):
            continue
        if _BASE not in name:
            out[name] = tensor
            continue
        layer, kind = name.split(_BASE)
        plain = f"{layer}.{kind}"
        if kind != "weight" or f"{layer}{_A}weight" not in named:  # a bias, or a layer without adapters
            out[plain] = tensor
            continue
        a, b = named[f"{layer}{_A}weight"].float(), named[f"{layer}{_B}weight"].float()
        out[plain] = (tensor.float() + scale * (b @ a)).to(tensor.dtype)
    return out


def peft_key(name: str) -> str:
    """A parameter's key in peft's adapter file: under `base_model.model.`, without the adapter's name."""
    return PEFT_PREFIX + name.replace(f".{ADAPTER}.", ".")


def adapter_state(named: dict[str, torch.Tensor], trained: Iterable[str]) -> dict[str, torch.Tensor]:
    """The trained tensors of `named`, keyed as in peft's adapter file."""
    return {peft_key(name): named[name].contiguous() for name in trained}


def save_adapter(named: dict[str, torch.Tensor], trained: Iterable[str], model: torch.nn.Module,
                 directory: str | Path) -> Path:
    """<directory>: adapter_model.safetensors (the trained tensors, fp32) and adapter_config.json (peft's)."""
    from safetensors.torch import save_file

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    save_file(adapter_state(named, trained), str(path / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    model.peft_lora_config.save_pretrained(str(path))
    return path


def load_adapter(directory: str | Path, trained: Iterable[str]) -> dict[str, torch.Tensor]:
    """The trained tensors `save_adapter` wrote, by parameter name; a precise error for any missing."""
    from safetensors.torch import load_file

    path = Path(directory) / ADAPTER_WEIGHTS
    if not path.exists():
        raise FileNotFoundError(f"{path}: no adapter weights (a checkpoint of a run without lora?)")
    saved = load_file(str(path))
    out, missing = {}, []
    for name in trained:
        if peft_key(name) in saved:
            out[name] = saved[peft_key(name)]
        else:
            missing.append(name)
    if missing:
        raise ValueError(f"{path}: {len(missing)} trained tensors missing (e.g. {missing[0]}): saved with another "
                         "lora.target_modules?")
    return out


def adapter_scale(directory: str | Path) -> float:
    """alpha / rank of a saved adapter (its peft config)."""
    cfg = json.loads((Path(directory) / ADAPTER_CONFIG).read_text())
    return cfg["lora_alpha"] / cfg["r"]


def merge_saved_adapter(base: dict[str, torch.Tensor], directory: str | Path) -> dict[str, torch.Tensor]:
    """A base model's weights (its own names) with a saved adapter merged in: what `rlvr.export` writes."""
    from safetensors.torch import load_file

    named = dict(base)
    for key, tensor in load_file(str(Path(directory) / ADAPTER_WEIGHTS)).items():
        name = key.removeprefix(PEFT_PREFIX)
        for part in (".lora_A.", ".lora_B."):
            if part in name:
                layer = name.split(part)[0]
                named[name.replace(part, part + ADAPTER + ".")] = tensor
                if f"{layer}.weight" in named:  # the adapted layer's frozen weight, under peft's name
                    named[f"{layer}{_BASE}weight"] = named.pop(f"{layer}.weight")
    return merged_weights(named, adapter_scale(directory))
