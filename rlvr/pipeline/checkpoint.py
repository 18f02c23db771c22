"""Checkpoint directories: one self-describing directory per saved step, written crash-safely.

Layout of `<run_dir>/checkpoints/step_000004/` (the number is the count of finished steps = the next step to run):
  actor_train/      model (safetensors), optimizer, LR schedule and RNG states of the training worker
  critic/           the same for the critic's value model (only when a critic runs)
  driver.json       step, quota credits, tracker run id, scheduler cursors per domain, infer RNG, KL
                    controller and running reward moments (rlvr/pipeline/advantage_step.py)
  config.yaml       the resolved config of the run

Crash safety: everything is written under `.tmp_step_NNNNNN/`, every file and directory of it is fsynced, and
only then is it renamed to `step_NNNNNN` (and the rename made durable by an fsync of the parent). A kill at any
point leaves either the new checkpoint complete or the previous one as the latest; leftovers of an interrupted
save (`.tmp_*`, `.trash_*`) are swept by the next save. Old checkpoints leave the listing by an atomic rename
before they are deleted, so a kill while deleting never exposes a half-deleted one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from rlvr.lifecycle.faults import fault_point

CKPT_DIR = "checkpoints"
RUN_STAMP = r"(-\d{8}-\d{6}-\d{3})?"  # what build.new_run_dir appends to the run name


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / CKPT_DIR / f"step_{step:06d}"


def begin(run_dir: Path, step: int) -> Path:
    root = run_dir / CKPT_DIR
    if root.exists():  # what an interrupted save or deletion left behind
        for leftover in root.iterdir():
            if leftover.name.startswith((".tmp_", ".trash_")):
                shutil.rmtree(leftover, ignore_errors=True)
    tmp = root / f".tmp_step_{step:06d}"
    tmp.mkdir(parents=True)
    return tmp


def commit(run_dir: Path, tmp: Path, step: int, driver_state: dict[str, Any], keep: int,
           records: tuple[Path, ...] = (), keep_optimizer: str = "all") -> Path:
    """Makes `tmp` the checkpoint of `step`. `records` (metrics.jsonl, ...) are fsynced first: the checkpoint
    vouches for every record of the steps before it. `keep_optimizer="last"`: once it is committed, the older
    checkpoints lose their optimizer state (see `drop_optimizer_state`)."""
    write_durably(tmp / "driver.json", json.dumps(driver_state, indent=1))
    shutil.copy(run_dir / "config.yaml", tmp / "config.yaml")
    fsync_tree(tmp)
    for record in records:
        if record.exists():
            fsync_path(record)
    fault_point("checkpoint.before_commit", step)  # a kill here must leave the previous checkpoint as latest
    final = step_dir(run_dir, step)
    if final.exists():  # the same step saved again (a resume from an older checkpoint)
        _discard(final)
    tmp.rename(final)
    fsync_path(final.parent)
    for old in list_checkpoints(run_dir)[:-keep]:
        _discard(old)
    if keep_optimizer == "last":
        for older in list_checkpoints(run_dir)[:-1]:
            drop_optimizer_state(older)
    return final


# The optimizer's files in a checkpoint, as the training strategies write them (rlvr/backends): the torch
# strategy's optimizer.pt, DeepSpeed's ZeRO partitions (fp32 masters + Adam moments, one file per rank).
OPTIMIZER_FILES = ("*/optimizer.pt", "*/deepspeed/*/*optim_states.pt")
NO_OPTIMIZER = "NO_OPTIMIZER_STATE"  # the marker a checkpoint without its optimizer state carries


def drop_optimizer_state(ckpt: Path) -> int:
    """Removes the optimizer state of a checkpoint that is no longer the newest (run.keep_optimizer=last): its
    weights stay (export, eval), resuming from it is refused by the strategies. Returns the bytes freed. The
    marker goes first: a kill in between leaves a checkpoint that says why it cannot be resumed from."""
    files = [f for pattern in OPTIMIZER_FILES for f in ckpt.glob(pattern)]
    if not files:
        return 0
    write_durably(ckpt / NO_OPTIMIZER, "run.keep_optimizer=last: the optimizer state is kept only in the run's "
                                       "newest checkpoint\n")
    freed = 0
    for f in files:
        freed += f.stat().st_size
        f.unlink()
    return freed


def check_optimizer_state(directory: Path) -> None:
    """Raises when the checkpoint holding `directory` (actor_train/, critic/) had its optimizer state dropped."""
    if (Path(directory).parent / NO_OPTIMIZER).exists():
        raise FileNotFoundError(f"{Path(directory).parent}: no optimizer state to resume from (run.keep_optimizer="
                                "last keeps it only in the newest checkpoint): resume from the run's newest "
                                "checkpoint, or export this one (python -m rlvr.export)")


def _discard(path: Path) -> None:
    trash = path.with_name(f".trash_{path.name}")
    if trash.exists():
        shutil.rmtree(trash)
    path.rename(trash)
    fsync_path(path.parent)
    shutil.rmtree(trash)


def write_durably(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def fsync_path(path: Path) -> None:
    """fsync of a file or a directory (a directory's fsync makes the names in it durable)."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """Every file and directory under `root` (written by other processes too: the training workers' saves)."""
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            fsync_path(Path(directory) / name)
        fsync_path(Path(directory))


def list_checkpoints(run_dir: Path) -> list[Path]:
    root = run_dir / CKPT_DIR
    if not root.exists():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_")
                  and (p / "driver.json").exists())


def find_resume_point(output_dir: Path, run_name: str, resume: str) -> Path:
    """`latest`: the newest checkpoint of the newest run named `<run_name>` or `<run_name>-<time>` (the stamp of
    build.new_run_dir);
    anything else: a checkpoint directory path."""
    if resume != "latest":
        path = Path(resume)
        if not (path / "driver.json").exists():
            raise FileNotFoundError(f"run.resume={resume}: not a checkpoint directory (no driver.json)")
        return path
    # exactly this name: `math` must not pick up the runs of `math-v2`
    own = re.compile(re.escape(run_name) + RUN_STAMP)
    runs = sorted((p for p in output_dir.glob(f"{run_name}*") if p.is_dir() and own.fullmatch(p.name)),
                  key=lambda p: p.stat().st_mtime)
    for run in reversed(runs):
        ckpts = list_checkpoints(run)
        if ckpts:
            return ckpts[-1]
    raise FileNotFoundError(f"run.resume=latest: no checkpoint under {output_dir}/{run_name}-*; "
                            "was the run started with run.save_every > 0?")


def load_driver_state(ckpt: Path) -> dict[str, Any]:
    return json.loads((ckpt / "driver.json").read_text())
