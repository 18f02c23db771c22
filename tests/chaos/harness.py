"""Runs a pipeline with planned SIGKILLs (tests/chaos/injector.py) and collects what the checks need."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rlvr.config.load import config_from_dict
from tests.chaos.injector import Injection, Injector, RecordingPipeline


@dataclass
class ChaosRun:
    pipeline: RecordingPipeline
    injections: list[Injection]
    records: list[dict]
    events: list[dict]
    errors: list[str]

    def total(self, key: str) -> float:
        return sum(r.get(key, 0.0) for r in self.records)

    def train_records(self) -> list[dict]:
        return [r for r in self.records if "batch/samples" in r]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_with_faults(tree: dict, plan: list[tuple[str, str | None, int]]) -> ChaosRun:
    """Runs the pipeline of `tree` to the end with the faults of `plan`; the caller closes `run.pipeline`."""
    pipeline = RecordingPipeline(config_from_dict(tree))
    injector = Injector(pipeline, plan, busy_timeout_s=60, recover_timeout_s=300)
    injector.start()
    try:
        pipeline.run()
    except BaseException:
        injector.stop()
        pipeline.close()
        raise
    injector.join(timeout=300)
    injector.stop()
    return ChaosRun(pipeline, injector.injections, read_jsonl(pipeline.run_dir / "metrics.jsonl"),
                    read_jsonl(pipeline.run_dir / "faults.jsonl"), injector.errors)
