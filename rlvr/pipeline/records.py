"""Step records on resume: each step once, the re-run steps replacing those of the killed run.

A run killed after its checkpoint of step S had logged steps S, S+1, ... that the resumed run runs again. Before
the resumed run logs anything, every JSONL record file of the run keeps only its records of steps < S (and loses
a line torn by the kill). The file is rewritten beside itself and renamed over the old one, so a kill during the
rewind leaves one or the other whole. TensorBoard and W&B get the same cut in `Trackers` (purge_step, rewind).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rlvr.pipeline.checkpoint import fsync_path

RECORD_FILES = ("metrics.jsonl", "val_samples.jsonl")


def rewind_jsonl(path: Path, step: int) -> int:
    """Keeps the records of `path` whose "step" is below `step`; returns how many were dropped."""
    if not path.exists():
        return 0
    kept, dropped = [], 0
    for line in path.read_text(errors="replace").splitlines():
        try:
            record_step = json.loads(line)["step"]
        except (ValueError, KeyError, TypeError):  # a line torn by the kill
            dropped += 1
            continue
        if record_step < step:
            kept.append(line)
        else:
            dropped += 1
    tmp = path.with_name(f".{path.name}.rewind")
    with open(tmp, "w") as f:
        f.write("".join(line + "\n" for line in kept))
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    fsync_path(path.parent)
    return dropped


def rewind_records(run_dir: Path, step: int) -> dict[str, int]:
    """Every record file of the run cut back to the steps before `step`; returns the count dropped per file."""
    return {name: rewind_jsonl(run_dir / name, step) for name in RECORD_FILES}
