"""Checkpoint directories: one self-describing directory per saved step, written atomically.

Layout of `<run_dir>/checkpoints/step_000004/` (the number is the count of finished steps = the next step to run):
  actor_train/      model (safetensors), optimizer, LR schedule and RNG states of the training worker
  critic/           the same for the critic's value model (only when a critic runs)
  driver.json       step, quota credits, tracker run id, scheduler cursors per domain, infer RNG, KL
                    controller and running reward moments (rlvr/pipeline/advantage_step.py)
  config.yaml       the resolved config of the run
A directory only gets its final name once everything is written, so `resume=latest` never sees a partial one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

CKPT_DIR = "checkpoints"


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / CKPT_DIR / f"step_{step:06d}"


def begin(run_dir: Path, step: int) -> Path:
    tmp = run_dir / CKPT_DIR / f".tmp_step_{step:06d}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def commit(run_dir: Path, tmp: Path, step: int, driver_state: dict[str, Any], keep: int) -> Path:
    (tmp / "driver.json").write_text(json.dumps(driver_state, indent=1))
    shutil.copy(run_dir / "config.yaml", tmp / "config.yaml")
    final = step_dir(run_dir, step)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    root = run_dir / CKPT_DIR
    if not root.exists():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_")
                  and (p / "driver.json").exists())


def find_resume_point(output_dir: Path, run_name: str, resume: str) -> Path:
    """`latest`: the newest checkpoint of the newest run named `<run_name>` or `<run_name>-<time>`;
    anything else: a checkpoint directory path."""
    if resume != "latest":
        path = Path(resume)
        if not (path / "driver.json").exists():
            raise FileNotFoundError(f"run.resume={resume}: not a checkpoint directory (no driver.json)")
        return path
    runs = sorted((p for p in output_dir.glob(f"{run_name}*") if p.is_dir()
                   and (p.name == run_name or p.name[len(run_name):].startswith("-"))),
                  key=lambda p: p.stat().st_mtime)
    for run in reversed(runs):
        ckpts = list_checkpoints(run)
        if ckpts:
            return ckpts[-1]
    raise FileNotFoundError(f"run.resume=latest: no checkpoint under {output_dir}/{run_name}-*; "
                            "was the run started with run.save_every > 0?")


def load_driver_state(ckpt: Path) -> dict[str, Any]:
    return json.loads((ckpt / "driver.json").read_text())
