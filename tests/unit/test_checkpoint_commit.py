"""Checkpoint directories written crash-safely: a save interrupted at any point leaves the previous checkpoint as
the latest; leftovers of interrupted saves are swept by the next one."""

import json
import os
import signal
import subprocess
import sys

import pytest

from rlvr.pipeline import checkpoint


def save(run_dir, step, keep=2):
    tmp = checkpoint.begin(run_dir, step)
    (tmp / "actor_train").mkdir()
    (tmp / "actor_train" / "weights.bin").write_bytes(os.urandom(64))
    return checkpoint.commit(run_dir, tmp, step, {"step": step}, keep, records=(run_dir / "metrics.jsonl",))


def test_commit_keeps_the_newest_and_sweeps_leftovers(tmp_path):
    (tmp_path / "config.yaml").write_text("run: {}\n")
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n')
    for step in (1, 2, 3):
        save(tmp_path, step)
    (tmp_path / "checkpoints" / ".tmp_step_000004").mkdir()  # what a killed save leaves
    (tmp_path / "checkpoints" / ".trash_step_000001").mkdir()  # what a killed deletion leaves
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == ["step_000002", "step_000003"]
    save(tmp_path, 4)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_000003", "step_000004"]
    assert checkpoint.load_driver_state(checkpoint.step_dir(tmp_path, 4)) == {"step": 4}


def test_the_same_step_saved_again_replaces_it(tmp_path):
    (tmp_path / "config.yaml").write_text("run: {}\n")
    save(tmp_path, 2)
    save(tmp_path, 2)
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == ["step_000002"]


KILLED_SAVE = """
import sys
from pathlib import Path
from rlvr.pipeline import checkpoint
run_dir = Path(sys.argv[1])
tmp = checkpoint.begin(run_dir, 2)
(tmp / "model.bin").write_bytes(b"new")
checkpoint.commit(run_dir, tmp, 2, {"step": 2}, keep=2)
"""


def test_a_kill_inside_the_save_leaves_the_previous_checkpoint_latest(tmp_path):
    (tmp_path / "config.yaml").write_text("run: {}\n")
    save(tmp_path, 1)
    env = {**os.environ, "RLVR_FAULT": "checkpoint.before_commit@2"}
    proc = subprocess.run([sys.executable, "-c", KILLED_SAVE, str(tmp_path)], env=env)
    assert proc.returncode == -signal.SIGKILL
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == ["step_000001"]
    assert json.loads((tmp_path / "checkpoints" / "step_000001" / "driver.json").read_text()) == {"step": 1}
    assert checkpoint.find_resume_point(tmp_path.parent, tmp_path.name, "latest").name == "step_000001"


def test_resume_latest_matches_the_run_name_exactly(tmp_path):
    """`math` must not resume from `math-v2`'s checkpoints, however recent (the name was once a prefix match)."""
    for name, step in (("math-20260101-000000-000", 1), ("math-v2-20260102-000000-000", 5), ("math-v2", 6)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text("run: {}\n")
        save(tmp_path / name, step)
    assert checkpoint.find_resume_point(tmp_path, "math", "latest").parent.parent.name == "math-20260101-000000-000"
    assert checkpoint.find_resume_point(tmp_path, "math-v2", "latest").name == "step_000006"
    with pytest.raises(FileNotFoundError, match="no checkpoint under"):
        checkpoint.find_resume_point(tmp_path, "mat", "latest")


def save_with_optimizer(run_dir, step, keep_optimizer):
    tmp = checkpoint.begin(run_dir, step)
    for part in ("actor_train", "critic"):
        (tmp / part / "model").mkdir(parents=True)
        (tmp / part / "model" / "model.safetensors").write_bytes(b"w" * 100)
        (tmp / part / "optimizer.pt").write_bytes(b"o" * 200)  # the torch strategy's
        (tmp / part / "deepspeed" / "ckpt").mkdir(parents=True)  # DeepSpeed's, one file per rank
        (tmp / part / "deepspeed" / "ckpt" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"o" * 300)
        (tmp / part / "deepspeed" / "ckpt" / "mp_rank_00_model_states.pt").write_bytes(b"m" * 10)
    return checkpoint.commit(run_dir, tmp, step, {"step": step}, keep=3, keep_optimizer=keep_optimizer)


@pytest.mark.parametrize("keep_optimizer", ["all", "last"])
def test_keep_optimizer_last_leaves_it_only_in_the_newest_checkpoint(tmp_path, keep_optimizer):
    (tmp_path / "config.yaml").write_text("run: {}\n")
    for step in (1, 2, 3):
        save_with_optimizer(tmp_path, step, keep_optimizer)
    sizes = {p.name: sum(f.stat().st_size for f in p.rglob("*.pt") if "optim" in f.name)
             for p in checkpoint.list_checkpoints(tmp_path)}
    if keep_optimizer == "all":
        assert sizes == {"step_000001": 1000, "step_000002": 1000, "step_000003": 1000}
        return
    assert sizes == {"step_000001": 0, "step_000002": 0, "step_000003": 1000}
    for step in (1, 2):
        older = checkpoint.step_dir(tmp_path, step)
        assert (older / "actor_train" / "model" / "model.safetensors").exists()  # the weights stay
        assert (older / "actor_train" / "deepspeed" / "ckpt" / "mp_rank_00_model_states.pt").exists()
        with pytest.raises(FileNotFoundError, match="no optimizer state to resume from"):
            checkpoint.check_optimizer_state(older / "actor_train")
    checkpoint.check_optimizer_state(checkpoint.step_dir(tmp_path, 3) / "actor_train")  # the newest resumes
