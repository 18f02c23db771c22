"""Crash-exact resume and reproducible runs, through the CLI, on the HF engine in fp32 with the tiny model.

Three runs of one config and seed:
  A  uninterrupted, 3 steps, a checkpoint after every step (the suite's shared finished run: tests/conftest.py);
  B  the same, SIGKILLed inside the save of step 2 (a fault point between writing the checkpoint and committing
     it): step_000001 must stay the latest, and B's steps 0-1 must equal A's (same config + seed = same run);
  B' `run.resume=latest`: re-runs steps 1-2 from step_000001; every record (metrics.jsonl, val_samples.jsonl,
     TensorBoard, W&B) then holds each step once, and every step equals A's (a resumed run is the uninterrupted
     one). Nothing of any of the three runs is left running.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.lifecycle.cli_runs import FINISHED, left_then_cleaned, records, run_cli, run_dir_of, trained, write_config
from tests.lifecycle.wandb_files import merged_steps, read_run

pytestmark = pytest.mark.slow

def tensorboard_steps(run_dir, tag: str) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()  # applies purge_step: a restart's earlier events of later steps are dropped, as the UI does
    return [e.step for e in events.Scalars(tag)]


def assert_nothing_left(watch) -> None:
    left = left_then_cleaned(watch)
    assert not left, f"the run left {left}"


def test_kill_inside_save_then_resume_equals_uninterrupted_run(finished_cli_run, tiny_model_dir, tmp_path):
    out = tmp_path / "runs"
    run_a = finished_cli_run
    assert run_a.exit_code == 0, run_a.log_tail
    assert not run_a.left, f"the run left {run_a.left}"
    uninterrupted = trained(run_a.run_dir)
    assert sorted(uninterrupted) == [0, 1, 2]

    config_b = write_config(tmp_path, tiny_model_dir, "b", **FINISHED)
    code, watch = run_cli(tmp_path, config_b, env={"RLVR_FAULT": "checkpoint.before_commit@2"})
    assert code == -9, watch.log_tail()  # SIGKILLed by the fault point
    assert_nothing_left(watch)
    run_b = run_dir_of(out, "b")
    ckpts = sorted(p.name for p in (run_b / "checkpoints").iterdir())
    assert ckpts == [".tmp_step_000002", "step_000001"], ckpts  # the interrupted save is not a checkpoint
    killed = trained(run_b)
    assert sorted(killed) == [0, 1]
    for step in (0, 1):  # same config and seed: the same rewards, samples, losses
        assert killed[step] == uninterrupted[step], f"step {step} differs between two runs of one config"

    code, watch = run_cli(tmp_path, config_b, "run.resume=latest")
    assert code == 0, watch.log_tail()
    assert_nothing_left(watch)
    driver_log = (run_b / "logs" / "driver.log").read_text()  # INFO lines go there, not to the quiet console
    assert "resumed from" in driver_log and "step_000001 at step 1" in driver_log
    assert [r["step"] for r in records(run_b)] == [0, 1, 2, 3]  # step 1 once, re-run; 3: the final validation
    resumed = trained(run_b)
    for step in (0, 1, 2):
        assert resumed[step] == uninterrupted[step], f"step {step} of the resumed run differs from the uninterrupted"
    val_steps = Counter(r["step"] for r in records(run_b, "val_samples.jsonl"))
    assert val_steps == Counter(r["step"] for r in records(run_a.run_dir, "val_samples.jsonl"))
    assert sorted(val_steps) == [0, 2, 3]
    assert sorted(p.name for p in (run_b / "checkpoints").iterdir()) == ["step_000002", "step_000003"]

    assert tensorboard_steps(run_b, "actor/loss") == [0, 1, 2]
    assert tensorboard_steps(run_b, "val_correct/all/mean") == [0, 2, 3]

    killed_segment, resumed_segment = read_run(run_b)
    assert resumed_segment.rewind_to == 0 and resumed_segment.steps == [1, 2, 3]
    # The killed process's W&B file holds what W&B had flushed (every second) before the kill: some prefix.
    assert killed_segment.steps == sorted(set(killed_segment.steps)) and set(killed_segment.steps) <= {0, 1}
    merged = merged_steps([killed_segment, resumed_segment])
    assert len(merged) == len(set(merged)) and merged[-3:] == [1, 2, 3], merged
    print(f"\nW&B segments: killed {killed_segment.steps}, resumed (rewind to {resumed_segment.rewind_to}) "
          f"{resumed_segment.steps}; merged {merged}")
    print("steps identical across runs A, B and resumed B:", json.dumps(sorted(uninterrupted[0])))
