"""The wire types of the sandbox service: what to run (`RunRequest`, with its `Limits`) and what happened (`RunResult`).

They are plain dataclasses with `to_dict` / `from_dict`; `from_dict` validates (a bad field is a `ValueError` that
names it, which the HTTP server turns into a 400).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

Language = Literal["python", "c", "cpp"]
LANGUAGES: tuple[str, ...] = ("python", "c", "cpp")

RunStatus = Literal[
    "ok", "runtime_error", "timeout", "memory_limit", "output_limit", "compile_error", "sandbox_error"
]
RUN_STATUSES: tuple[str, ...] = (
    "ok", "runtime_error", "timeout", "memory_limit", "output_limit", "compile_error", "sandbox_error"
)

# The name the program gets in its working directory, per language; `files` may not use it.
ENTRY_FILES = {"python": "main.py", "c": "main.c", "cpp": "main.cpp"}


@dataclass
class Limits:
    """Per-run limits. CPU time and memory are per process (rlimits) and, for memory, also summed over the
    sandbox's processes by its supervisor; output is stdout + stderr together."""

    cpu_time_s: float = 5.0
    wall_time_s: float = 10.0
    memory_mb: int = 512
    max_processes: int = 64
    max_output_bytes: int = 1_000_000
    max_file_bytes: int = 10_000_000

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "Limits":
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ValueError(f"limits must be an object, got {type(data).__name__}")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"unknown limits key(s) {unknown}; known: {sorted(known)}")
        values = {}
        for name, value in data.items():
            integer = known[name].type in ("int", int)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"limits.{name} must be a number, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"limits.{name} must be a positive finite number, got {value!r}")
            if integer and value != int(value):
                raise ValueError(f"limits.{name} must be an integer, got {value!r}")
            values[name] = int(value) if integer else float(value)
        return cls(**values)

    def check_within(self, ceiling: "Limits") -> None:
        """Raises ValueError when a limit asks for more than `ceiling` (a backend's maximum)."""
        for f in fields(self):
            if getattr(self, f.name) > getattr(ceiling, f.name):
                raise ValueError(
                    f"limits.{f.name}={getattr(self, f.name)} exceeds this sandbox's maximum {getattr(ceiling, f.name)}"
                )


@dataclass
class RunRequest:
    """One program to run. `files` are extra text files written next to the program (relative names only)."""

    language: Language
    code: str
    stdin: str = ""
    files: dict[str, str] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)

    def __post_init__(self) -> None:
        if isinstance(self.limits, dict):
            self.limits = Limits.from_dict(self.limits)
        self.validate()

    def validate(self) -> None:
        if self.language not in LANGUAGES:
            raise ValueError(f"language must be one of {list(LANGUAGES)}, got {self.language!r}")
        if not isinstance(self.code, str):
            raise ValueError("code must be a string")
        if not isinstance(self.stdin, str):
            raise ValueError("stdin must be a string")
        if not isinstance(self.files, dict):
            raise ValueError("files must be an object of name -> text")
        if not isinstance(self.limits, Limits):
            raise ValueError("limits must be a Limits")
        for name, text in self.files.items():
            check_file_name(name)
            if name == ENTRY_FILES[self.language]:
                raise ValueError(f"files may not contain {name!r}: that is where `code` goes")
            if not isinstance(text, str):
                raise ValueError(f"files[{name!r}] must be a string")

    def to_dict(self) -> dict[str, Any]:
        return {
            "language": self.language,
            "code": self.code,
            "stdin": self.stdin,
            "files": dict(self.files),
            "limits": self.limits.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Any) -> "RunRequest":
        if not isinstance(data, dict):
            raise ValueError(f"a run request must be a JSON object, got {type(data).__name__}")
        allowed = {"language", "code", "stdin", "files", "limits"}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ValueError(f"unknown request key(s) {unknown}; known: {sorted(allowed)}")
        for required in ("language", "code"):
            if required not in data:
                raise ValueError(f"missing required key {required!r}")
        return cls(
            language=data["language"],
            code=data["code"],
            stdin=data.get("stdin", ""),
            files=data.get("files") or {},
            limits=Limits.from_dict(data.get("limits")),
        )


@dataclass
class RunResult:
    """What happened. `exit_code` is the program's exit status (128 + N when killed by signal N, None when it
    never ran); `duration_s` is the wall time of the whole request (sandbox start, compilation and run)."""

    status: RunStatus
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "RunResult":
        if not isinstance(data, dict):
            raise ValueError(f"a run result must be a JSON object, got {type(data).__name__}")
        status = data.get("status")
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}")
        exit_code = data.get("exit_code")
        return cls(
            status=status,
            stdout=str(data.get("stdout", "")),
            stderr=str(data.get("stderr", "")),
            exit_code=None if exit_code is None else int(exit_code),
            duration_s=float(data.get("duration_s", 0.0)),
        )


def check_file_name(name: Any) -> None:
    """A name for a file inside the working directory: relative, no `..`, no empty parts, no NUL, bounded."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"file name must be a non-empty string, got {name!r}")
    if len(name) > 255 or "\0" in name or "\\" in name or name.startswith("/"):
        raise ValueError(f"bad file name {name!r}: relative names of at most 255 characters only")
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts) or len(parts) > 8:
        raise ValueError(f"bad file name {name!r}: no '.', '..' or empty path parts")
