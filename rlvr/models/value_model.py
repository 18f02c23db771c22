"""The critic's model: a causal-LM backbone (the transformer without its LM head) plus a scalar value head.

`ValueModel(input_ids, attention_mask)` -> [B, T] values, one per position: V at position t is the value of the
state "prompt + response tokens up to t", i.e. before the token at t+1 is generated. In the trainer's
target-aligned layout (rlvr/data/batch.py) that is exactly column t: the value of the state in which the token
the column is about was chosen. `value_forward` returns those columns.

A value model is created from any causal-LM directory (by default the actor's own weights, as in verl / ROLL /
OpenRLHF): the backbone takes the LM's transformer weights and the head is new, drawn from N(0, 1/(H+1)^2) with a
fixed seed (OpenRLHF's initialisation; small, so the first values are near 0, and non-zero, so the backbone gets
gradients from the first step). Saved critics are directories with the backbone's config, one safetensors file
of every weight (backbone.* and value_head.weight) and a marker file, and load back exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

MARKER = "rlvr_value_model.json"
WEIGHTS = "model.safetensors"


class ValueModel(nn.Module):
    def __init__(self, backbone: nn.Module, head_seed: int = 0):
        super().__init__()
        self.backbone = backbone
        self.config = backbone.config
        hidden = backbone.config.hidden_size
        self.value_head = nn.Linear(hidden, 1, bias=False)
        generator = torch.Generator().manual_seed(head_seed)  # the same head on every rank and every run
        with torch.no_grad():
            self.value_head.weight.copy_(torch.randn(1, hidden, generator=generator) / (hidden + 1))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, **segments) -> torch.Tensor:
        """attention_mask None with position_ids: packed rows (rlvr/data/packing.py), each attending to itself
        (`segments`: rlvr/models/segment_attention.py)."""
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                               use_cache=False, **segments).last_hidden_state
        return self.value_head(hidden).squeeze(-1)

    def gradient_checkpointing_enable(self, **kwargs) -> None:
        self.backbone.gradient_checkpointing_enable(**kwargs)

    # ------------------------------------------------------------------ files
    @classmethod
    def from_pretrained(cls, path: str | Path, head_seed: int = 0) -> "ValueModel":
        """A saved critic (marker present) exactly as saved; otherwise a causal-LM directory's backbone + a new
        head."""
        from transformers import AutoConfig, AutoModel

        path = Path(path)
        if not (path / MARKER).exists():
            return cls(AutoModel.from_pretrained(path, dtype=torch.float32), head_seed)
        from safetensors.torch import load_file

        model = cls(AutoModel.from_config(AutoConfig.from_pretrained(path), dtype=torch.float32), head_seed)
        model.load_state_dict(load_file(str(path / WEIGHTS)))
        return model

    @staticmethod
    def export(weights: dict[str, torch.Tensor], config, path: str | Path) -> None:
        """Writes full fp32 `weights` (this model's named parameters) as a directory `from_pretrained` reads."""
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        config.save_pretrained(path)
        save_file({k: v.contiguous() for k, v in weights.items()}, str(path / WEIGHTS), metadata={"format": "pt"})
        (path / MARKER).write_text(json.dumps({"kind": "value_model", "hidden_size": config.hidden_size}))


def value_forward(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  start: int) -> torch.Tensor:
    """[B, T-1-start] values of target columns start..T-2 (see the module docstring), in float32."""
    return model(input_ids=input_ids, attention_mask=attention_mask)[:, start:-1].float()


def value_forward_packed(model: nn.Module, input_ids: torch.Tensor, position_ids: torch.Tensor,
                         keep: torch.Tensor, segments: dict) -> torch.Tensor:
    """[1, K] values at stream positions `keep` of packed rows, in float32."""
    return model(input_ids=input_ids, position_ids=position_ids, **segments)[:, keep].float()


def is_value_model_dir(path: str | Path) -> bool:
    return (Path(path) / MARKER).exists()
