"""Runs of the CLI (`python -m rlvr.start`) in a subprocess, as a user starts them, for the lifecycle tests."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import tiny_config
from tests.lifecycle.runwatch import RunWatch, cli_command, run_dir_of

# Metrics that measure time or concurrency, not what was trained: they differ between any two runs.
# wall-clock metrics: what two runs of one seed may differ in (weight_sync/gb is the model's size, not a time)
TIMING_KEYS = ("time/", "system/", "timing/", "latency", "in_flight", "reward_span", "weight_sync/seconds",
               "weight_sync/gb_per_s")


def write_config(tmp_path: Path, model_dir: str, name: str, **sections) -> Path:
    tree = tiny_config(model_dir, str(tmp_path / "runs"), **sections)
    tree["run"]["name"] = name
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def run_cli(tmp_path: Path, config: Path, *overrides: str, env: dict[str, str] | None = None,
            timeout_s: float = 600) -> tuple[int, RunWatch]:
    """Runs the CLI to its end; returns the exit code and the watch (for its leftovers)."""
    log = tmp_path / f"{config.stem}-{len(list(tmp_path.glob('*.log')))}.log"
    watch = RunWatch(cli_command(config, *overrides), log, env)
    try:
        return watch.wait_exit(timeout_s), watch
    except BaseException:
        watch.clean_up()
        raise


def records(run_dir: Path, name: str = "metrics.jsonl") -> list[dict]:
    path = run_dir / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def trained(run_dir: Path) -> dict[int, dict]:
    """step -> its training record, without the timing metrics (each step must appear once)."""
    out: dict[int, dict] = {}
    for r in records(run_dir):
        if "actor/loss" in r:
            assert r["step"] not in out, f"step {r['step']} logged twice in {run_dir}/metrics.jsonl"
            out[r["step"]] = {k: v for k, v in r.items() if not any(t in k for t in TIMING_KEYS)}
    return out


__all__ = ["TIMING_KEYS", "records", "run_cli", "run_dir_of", "trained", "write_config"]
