"""What every config module shares: strict models (unknown keys rejected) and errors that know their key."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """A configuration problem, with the key and its origin in the message. Raised with `key` by code that knows
    the key but not where its value came from (the checks before a run starts): the message starts with the key
    and the caller that knows the file and the overrides names the origin (rlvr.config.load.key_origin)."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class _KeyedError(ValueError):
    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


def _keyed(key: str, message: str) -> _KeyedError:
    return _KeyedError(key, message)
