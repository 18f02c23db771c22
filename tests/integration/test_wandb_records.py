"""What a W&B run (offline, real wandb) holds: metrics against the global step, grouped with define_metric, one
table of validation responses per validation, the resolved config, the report's plots."""

from __future__ import annotations

import json
import os

import wandb

from rlvr.config.run import TrackersConfig
from rlvr.report import build_report
from rlvr.telemetry.trackers import Trackers
from tests.helpers.run_dirs import write_run


def test_wandb_gets_sections_tables_config_and_plots(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = write_run(tmp_path / "run")
    images = build_report(run_dir).images
    trackers = Trackers(TrackersConfig(jsonl=False, tensorboard=False, wandb_mode="offline"), run_dir, "run",
                        {"run": {"max_steps": 3}})
    row = {"domain": "math", "prompt": "uid-1", "question": "2 + 3?", "response": "5", "ground_truth": "5",
           "reward": 1.0, "correct": True, "status": "ok"}
    trackers.log({"val_correct/math/mean": 0.5, "math/reward/mean": 0.25}, 0)
    trackers.log_val_samples([row], 0)
    trackers.log({"val_correct/math/mean": 0.75}, 3)
    trackers.log_val_samples([row, {**row, "question": None, "correct": False}], 3)
    trackers.log_images(images, 3)
    trackers.close()
    wandb.teardown()  # the service this test started in pytest's process ends with it
    os.environ.pop("WANDB_SERVICE", None)  # and later tests' children do not inherit it

    (offline,) = (run_dir / "wandb").glob("offline-run-*")
    records = next(offline.glob("run-*.wandb")).read_bytes()
    # define_metric records (the glob and its step metric) and every logged key are in the run's record file
    for text in ("val_correct/*", "global_step", "val_correct/math/mean", "math/reward/mean", "max_steps"):
        assert text.encode() in records, text
    tables = sorted((offline / "files/media/table/val").glob("samples_*.table.json"), key=lambda p: p.stat().st_mtime)
    assert len(tables) == 2  # one per validation
    last = json.loads(tables[-1].read_text())
    assert last["columns"] == ["step", "domain", "question", "response", "ground_truth", "reward", "correct",
                               "status"]
    assert last["data"] == [[3, "math", "2 + 3?", "5", "5", 1.0, True, "ok"],
                            [3, "math", "uid-1", "5", "5", 1.0, False, "ok"]]  # no question: the uid
    plots = {p.name.rsplit("_", 2)[0] for p in (offline / "files/media/images/report").glob("*.png")}
    assert plots == set(images)
