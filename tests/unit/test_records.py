"""Rewinding a run's JSONL records to the steps before a checkpoint (crash-exact resume)."""

import json

from rlvr.pipeline.records import rewind_jsonl, rewind_records


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))


def test_keeps_the_steps_before_the_checkpoint_and_drops_a_torn_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write(path, [json.dumps({"step": s, "x": s}) for s in (0, 1, 2, 2, 3)] + ['{"step": 4, "x'])
    assert rewind_jsonl(path, 2) == 4  # 2, 2, 3 and the torn line
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [0, 1]
    assert not list(tmp_path.glob(".*"))  # the rewrite's temporary file is gone


def test_every_record_file_and_missing_files(tmp_path):
    write(tmp_path / "val_samples.jsonl", [json.dumps({"step": s}) for s in (0, 0, 2, 2)])
    assert rewind_records(tmp_path, 1) == {"metrics.jsonl": 0, "val_samples.jsonl": 2}
    assert not (tmp_path / "metrics.jsonl").exists()
    assert (tmp_path / "val_samples.jsonl").read_text().count("\n") == 2
