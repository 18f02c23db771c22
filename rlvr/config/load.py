"""Loading: YAML file + `key=value` overrides -> validated `Config`, with errors that name the key and its origin."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rlvr.config.base import ConfigError, _KeyedError
from rlvr.config.root import Config


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a", "b", "c"], value parsed as YAML, so 3 is an int and [a, b] a list)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override '{text}': expected key=value, e.g. run.max_steps=2")
    return key.strip().split("."), yaml.safe_load(raw) if raw.strip() else None


def apply_override(tree: dict, path: list[str], value: Any) -> None:
    node = tree
    for i, part in enumerate(path[:-1]):
        child = node.get(part)
        if isinstance(child, str) and path[: i + 1] == ["algorithm"]:
            child = {"preset": child}  # `algorithm: dapo` in YAML plus `algorithm.x=...` on the command line
        if child is None:
            child = {}
        if not isinstance(child, dict):
            raise ConfigError(f"override '{'.'.join(path)}': '{'.'.join(path[: i + 1])}' is not a section")
        node[part] = child
        node = child
    node[path[-1]] = value


def load_config(path: str | Path, overrides: list[str] = ()) -> Config:
    path = Path(path)
    try:
        tree = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML: {err}") from None
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    for text in overrides:
        apply_override(tree, *parse_override(text))
    overridden = overrides_by_key(overrides)
    try:
        cfg = Config.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(_describe(err, path, overridden)) from None
    if cfg.run.name is None:
        cfg.run.name = path.stem
    return cfg


def _describe(err: ValidationError, path: Path, overridden: dict[str, str]) -> str:
    lines = []
    for item in err.errors():
        key = ".".join(str(p) for p in item["loc"])
        msg = item["msg"]
        ctx_err = (item.get("ctx") or {}).get("error")
        if isinstance(ctx_err, _KeyedError):  # a cross-field check that knows its key
            key = key + "." + ctx_err.key if key else ctx_err.key
            msg = ctx_err.message
        elif item["type"] == "extra_forbidden":
            msg = "unknown key"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        lines.append(f"{key_origin(key, path, overridden)}: {key or '<top level>'}: {msg}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def key_origin(key: str, path: Path | str, overridden: dict[str, str]) -> str:
    """Where the value of `key` came from: the override that set it, or set a section above it (the most specific:
    `algorithm=ppo algorithm.lam=2` blames the second), or one below it (`foo.bar=1` is why `foo` is unknown,
    `rollout.domain_interleave_probs.x=1` why the probabilities are wrong); else the config file."""
    above = [k for k in overridden if key == k or key.startswith(k + ".")]
    below = [k for k in overridden if key and k.startswith(key + ".")]
    if above or below:
        return f"override '{overridden[max(above, key=len) if above else below[-1]]}'"
    return str(path)


def overrides_by_key(overrides: list[str]) -> dict[str, str]:
    """{"a.b": "a.b=3"} for each key=value override, the last one of a key winning as it does in the config."""
    return {".".join(parse_override(text)[0]): text for text in overrides}


def import_class(key: str, path: str, base: type, what: str) -> type:
    """The subclass of `base` that the import path `path` (the value of config key `key`) names; a ConfigError
    naming the key otherwise, so a typo fails before any actor starts."""
    module_name, _, attr = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"cannot import '{path}': {err}", key=key) from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(f"'{path}' is not {what}", key=key)
    return cls


def save_resolved(cfg: Config, run_dir: Path) -> Path:
    out = run_dir / "config.yaml"
    out.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    return out


def config_from_dict(tree: dict) -> Config:
    """For tests and programmatic use: the same validation as load_config."""
    try:
        return Config.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(_describe(err, Path("<dict>"), {})) from None
