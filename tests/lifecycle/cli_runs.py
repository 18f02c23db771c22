"""Runs of the CLI (`python -m rlvr.start`) in a subprocess, as a user starts them, for the lifecycle tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.conftest import tiny_config
from tests.lifecycle.runwatch import Leftovers, RunWatch, cli_command, run_dir_of

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


# The uninterrupted run the resume and eval tests share (tests/conftest.py finished_cli_run): the HF engine in fp32,
# so that the same config and seed give the same run to the last bit.
FINISHED = dict(run={"max_steps": 3, "eval_every": 2, "save_every": 1, "seed": 7},
                trackers={"wandb": True, "wandb_mode": "offline", "tensorboard": True, "jsonl": True},
                generation={"engine": "hf", "max_new_tokens": 12, "temperature": 1.0, "dtype": "float32"})


@dataclass
class FinishedRun:
    config: Path  # its config file ("a.yaml"), for runs of the same config and for `rlvr.eval`
    run_dir: Path
    exit_code: int
    log_tail: str
    left: Leftovers  # what of its processes and files was still there after it ended


def finished_run(tmp_path: Path, model_dir: str) -> FinishedRun:
    config = write_config(tmp_path, model_dir, "a", **FINISHED)
    code, watch = run_cli(tmp_path, config)
    return FinishedRun(config, run_dir_of(tmp_path / "runs", "a"), code, watch.log_tail(), left_then_cleaned(watch))


def left_then_cleaned(watch: RunWatch) -> Leftovers:
    """What of an ended run was still there after a minute to go away; then whatever remains is killed."""
    try:
        return watch.leftovers(timeout_s=60)
    finally:
        watch.clean_up()


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


__all__ = ["FINISHED", "TIMING_KEYS", "FinishedRun", "finished_run", "left_then_cleaned", "records", "run_cli",
           "run_dir_of", "trained", "write_config"]
