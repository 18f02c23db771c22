"""A run directory read back: metrics.jsonl, val_samples.jsonl and config.yaml, as a run left them - also a run
that crashed (a torn last line, no final validation, a missing file)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


EVALUATED = "evaluated.json"  # what `python -m rlvr.eval` scored in this directory (rlvr/cli/evaluate.py)


class RunDirError(ValueError):
    """Not a run directory (nothing to report), with the path in the message."""


@dataclass
class RunData:
    path: Path
    name: str
    records: list[dict[str, Any]]  # one per tracker call, in file order: {"step": k, metric: value, ...}
    val_samples: list[dict[str, Any]]
    config: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # what was unreadable, for the report to say
    evaluated: dict[str, Any] | None = None  # evaluated.json of a `python -m rlvr.eval` model: no training

    @property
    def domains(self) -> list[str]:
        """The configured domains in config order, else those the metrics name."""
        if self.config.get("domains"):
            return list(self.config["domains"])
        found = {m.group(1) for r in self.records for k in r
                 if (m := re.match(r"(?:val_correct/)?([\w\-]+)/(?:reward/mean|mean)$", k)) and m.group(1) != "all"}
        return sorted(found)

    @property
    def max_steps(self) -> int | None:
        return (self.config.get("run") or {}).get("max_steps")

    @property
    def last_step(self) -> int | None:
        """The last training step logged (validation records at step = max_steps come after the last one)."""
        steps = [r["step"] for r in self.records if any(k.startswith("time/") for k in r)]
        return max(steps) if steps else None

    @property
    def finished(self) -> bool:
        last = self.last_step
        return self.max_steps is not None and last is not None and last + 1 >= self.max_steps

    def series(self, key: str) -> list[tuple[int, float]]:
        """(step, value) for every record that has `key`; a step logged twice (a resumed run) keeps the last."""
        by_step: dict[int, float] = {}
        for r in self.records:
            if key in r and isinstance(r[key], (int, float)):
                by_step[int(r["step"])] = float(r[key])
        return sorted(by_step.items())

    def series_sum(self, prefix: str) -> list[tuple[int, float]]:
        """(step, sum of every metric whose name starts with `prefix`) for the steps that log any of them."""
        by_step: dict[int, float] = {}
        for r in self.records:
            parts = [v for k, v in r.items() if k.startswith(prefix) and isinstance(v, (int, float))]
            if parts:
                by_step[int(r["step"])] = float(sum(parts))
        return sorted(by_step.items())

    def keys(self, pattern: str) -> list[str]:
        rx = re.compile(pattern)
        return sorted({k for r in self.records for k in r if rx.fullmatch(k)})


def _read_jsonl(path: Path, problems: list[str]) -> list[dict[str, Any]]:
    if not path.exists():
        problems.append(f"{path.name} is missing")
        return []
    rows = []
    lines = path.read_text(errors="replace").splitlines()
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            # a run killed while writing leaves a torn last line; a torn line elsewhere is corruption
            where = "last line (torn by the crash)" if i == len(lines) else f"line {i}"
            problems.append(f"{path.name}: {where} is not JSON, skipped")
            continue
        if isinstance(row, dict) and "step" in row:
            rows.append(row)
    return rows


def load_run(path: str | Path) -> RunData:
    path = Path(path)
    if not path.is_dir():
        raise RunDirError(f"{path}: not a directory")
    if not (path / "metrics.jsonl").exists() and not (path / "config.yaml").exists():
        raise RunDirError(f"{path}: no metrics.jsonl and no config.yaml: not an rlvr run directory")
    problems: list[str] = []
    records = _read_jsonl(path / "metrics.jsonl", problems)
    samples = _read_jsonl(path / "val_samples.jsonl", problems) if (path / "val_samples.jsonl").exists() else []
    config: dict[str, Any] = {}
    if (path / "config.yaml").exists():
        try:
            config = yaml.safe_load((path / "config.yaml").read_text()) or {}
        except yaml.YAMLError as err:
            problems.append(f"config.yaml is not valid YAML: {err}")
    evaluated = None
    if (path / EVALUATED).exists():
        try:
            evaluated = json.loads((path / EVALUATED).read_text())
        except json.JSONDecodeError as err:
            problems.append(f"{EVALUATED} is not valid JSON: {err}")
    return RunData(path, path.name, records, samples, config, problems, evaluated)
