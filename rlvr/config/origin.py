"""`--print-config`: the resolved config, each value with where it came from.

    default   the field's default in rlvr/config/
    preset    the algorithm preset's value (rlvr/algorithms/presets.py)
    file      the YAML file
    override  a key=value on the command line (named)
    derived   filled in from other values (run.name from the file name, a single domain's probability, ...)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel

from rlvr.algorithms.presets import PRESETS
from rlvr.config import precision
from rlvr.config.load import overrides_by_key, parse_override
from rlvr.config.root import Config


def leaf_paths(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{"a.b.c": value} for every non-dict (or empty dict) value of a nested dict."""
    if not isinstance(tree, dict) or (not tree and prefix):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(leaf_paths(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _covers(keys: dict[str, Any], path: str) -> Any:
    """The entry of `keys` that set `path`: the path itself or a section above it."""
    for key, value in keys.items():
        if path == key or path.startswith(key + "."):
            return value
    return None


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        model = _model_of(arg)
        if model is not None:
            return model
    return None


def field_default(path: str) -> tuple[bool, Any]:
    """(True, default as it dumps to JSON) for a config path, walking nested models and dict[str, Model]
    sections (the key inside such a dict is skipped); (False, None) where there is no default."""
    model: type[BaseModel] | None = Config
    parts = path.split(".")
    i = 0
    while model is not None and i < len(parts):
        info = model.model_fields.get(parts[i])
        if info is None:
            return False, None
        i += 1
        nested = _model_of(info.annotation)
        if nested is not None and i < len(parts):
            if get_origin(info.annotation) is dict or dict in (get_origin(a) for a in get_args(info.annotation)):
                i += 1  # domains.<name>.reward...: skip the user's key
            model = nested
            continue
        if info.is_required():
            return False, None
        default = info.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            default = default.model_dump(mode="json")
            rest = ".".join(parts[i:])
            return (True, default) if not rest else (rest in leaf_paths(default), leaf_paths(default).get(rest))
        if i < len(parts):  # a key inside a dict-valued field (e.g. rollout.domain_interleave_probs.math)
            return False, None
        return True, yaml.safe_load(yaml.safe_dump(default)) if isinstance(default, tuple) else default
    return False, None


def config_origins(path: str | Path, overrides: list[str], cfg: Config) -> dict[str, str]:
    tree = yaml.safe_load(Path(path).read_text()) or {}
    if isinstance(tree.get("algorithm"), str):
        tree["algorithm"] = {"preset": tree["algorithm"]}
    in_file = leaf_paths(tree)
    overridden = overrides_by_key(overrides)
    preset = cfg.algorithm.preset
    from_preset = leaf_paths(PRESETS.get(preset, {}))
    origins = {}
    for key, value in leaf_paths(cfg.model_dump(mode="json")).items():
        if (text := _covers(overridden, key)) is not None:
            origins[key] = f"override {text}"
        elif _covers(in_file, key) is not None or key in in_file:
            origins[key] = "file"
        elif key in from_preset:
            origins[key] = f"preset {preset}"
        else:
            known, default = field_default(key)
            origins[key] = "default" if known and _same(default, value) else "derived"
    for key in precision.AUTO_KEYS:  # `auto` resolved: say so, and why
        if key in overridden:
            given = parse_override(overridden[key])[1]
        else:
            given = in_file[key] if key in in_file else field_default(key)[1]
        if given == "auto" and key in origins:
            base = "default" if origins[key] == "derived" else origins[key]
            origins[key] = f"{base}, auto: {precision.host_precision()[1]}"
    return origins


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return a == b


def _scalar(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("\n...").strip()


def render_with_origins(cfg: Config, origins: dict[str, str]) -> str:
    """The resolved config as YAML, each leaf with a `# origin` comment (aligned)."""
    rows: list[tuple[str, str]] = []

    def walk(node: dict, prefix: str, indent: int) -> None:
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            pad = "  " * indent
            if isinstance(value, dict) and value:
                rows.append((f"{pad}{key}:", ""))
                walk(value, path, indent + 1)
            else:
                rows.append((f"{pad}{key}: {_scalar(value)}", origins.get(path, "")))

    walk(cfg.model_dump(mode="json"), "", 0)
    width = min(60, max(len(text) for text, _ in rows))
    return "\n".join(f"{text:<{width}}  # {origin}" if origin else text for text, origin in rows)
