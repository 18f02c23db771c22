"""One inference engine for every model `rlvr.eval` scores, where the models can share it.

Scoring the checkpoints of a run (or of a race: 21 models a seed in bench/race.py) used to start a vLLM engine per
model, 60-90 s each on a 2-core CPU, for models that differ only in their weights. An engine depends on its model
directory through the architecture (config.json), the generation defaults vLLM reads (generation_config.json) and
the tokenizer (detokenisation, special and stop tokens); when those match, the next model's weights are loaded
into the running engine through the same `load_weights` the training run's weight sync uses (its contract test:
generation then matches a model built with those weights). Anything else starts a new engine, as before.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

# config keys that say how a file was written, not what the model computes: the engine's dtype is the config's
# generation.dtype, whatever the checkpoint was saved in; use_cache is a runtime switch the trainer turns off
# (a checkpoint's config says false, its base model's true) and the engine sets for itself
BOOKKEEPING = frozenset({"torch_dtype", "dtype", "transformers_version", "_name_or_path", "name_or_path",
                         "use_cache"})
WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".safetensors.index.json")
NOT_READ = (".md", "rlvr_export.json")  # model cards; where an `rlvr.export` came from (a path per checkpoint)


def engine_key(model_path: str) -> str | None:
    """A digest of what an engine built for this directory depends on besides its weights: every JSON file parsed
    (key order, formatting and the bookkeeping keys do not count) and every other non-weight file byte for byte.
    None where the weights are not safetensors files at the top of a directory: such a model gets its own engine."""
    root = Path(model_path)
    if not root.is_dir() or not any(root.glob("*.safetensors")):
        return None
    digest = hashlib.sha256()
    for file in sorted(p for p in root.iterdir() if p.is_file() and not p.name.endswith(WEIGHTS + NOT_READ)):
        data = file.read_bytes()
        if file.suffix == ".json":
            parsed = json.loads(data)
            if isinstance(parsed, dict):
                parsed = {k: v for k, v in parsed.items() if k not in BOOKKEEPING}
            data = json.dumps(parsed, sort_keys=True).encode()
        digest.update(file.name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def read_weights(model_path: str, dtype: str) -> dict[str, torch.Tensor]:
    """The directory's safetensors tensors by checkpoint name, floating ones in the engine's dtype."""
    from safetensors.torch import load_file

    target = getattr(torch, dtype)
    tensors: dict[str, torch.Tensor] = {}
    for file in sorted(Path(model_path).glob("*.safetensors")):
        tensors.update(load_file(str(file)))
    return {name: t.to(target) if t.is_floating_point() else t for name, t in tensors.items()}
