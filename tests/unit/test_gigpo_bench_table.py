"""bench/gigpo.py's training part: the table of an --out file (mean +- SE per step over seeds, the final validation
difference in pooled standard errors), and a repeated command that finds every run in --out starts nothing."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tests.helpers.bench_modules import load_bench


@pytest.fixture(scope="module")
def gigpo():
    return load_bench("gigpo")


def row(preset: str, seed: int, train: list[float], val_end: float) -> dict:
    records = [{"step": s, "grid/episode/success/mean": v, "grid/episode/invalid_action_rate": 0.1}
               for s, v in enumerate(train)]
    records[0]["val_correct/grid/mean"] = 0.25
    records.append({"step": len(train), "val_correct/grid/mean": val_end})
    return {"preset": preset, "seed": seed, "steps": len(train), "elapsed_s": 100.0 + seed, "cpu": "test CPU",
            "prompts": 8, "group": 4, "engine": "vllm", "cached": None, "records": records}


def table_rows(text: str) -> dict[str, list[str]]:
    return {cells[0].strip(): [c.strip() for c in cells[1:]]
            for cells in (l.strip("|").split("|") for l in text.splitlines() if l.startswith("| ") and "step" not in l)}


def test_the_table_gives_mean_se_per_step_and_the_final_difference(gigpo, capsys):
    rows = [row("gigpo", 0, [0.2, 0.4], 0.5), row("multi_step_grpo", 0, [0.2, 0.2], 0.3),
            row("gigpo", 1, [0.4, 0.6], 0.7), row("multi_step_grpo", 1, [0.4, 0.4], 0.5)]
    gigpo.train_table(rows)
    out = capsys.readouterr().out
    cells = table_rows(out)
    # columns: gigpo train, multi_step_grpo train, gigpo val, multi_step_grpo val; two values 0.2 apart have a
    # sample standard deviation of 0.1414, so a standard error of 0.1414 / sqrt(2) = 0.1
    assert cells["0"] == ["0.300 +- 0.100", "0.300 +- 0.100", "0.250 +- 0.000", "0.250 +- 0.000"]
    assert cells["1"] == ["0.500 +- 0.100", "0.300 +- 0.100", "-", "-"]
    assert cells["2"] == ["-", "-", "0.600 +- 0.100", "0.400 +- 0.100"]
    assert "gigpo - multi_step_grpo: +0.200 (+1.41 pooled SE)" in out  # pooled sqrt(0.1^2 + 0.1^2)


def test_one_seed_gives_bare_values_and_no_difference(gigpo, capsys):
    gigpo.train_table([row("gigpo", 0, [0.2], 0.5), row("multi_step_grpo", 0, [0.2], 0.3)])
    out = capsys.readouterr().out
    assert table_rows(out)["1"] == ["-", "-", "0.500", "0.300"]
    assert "pooled SE" not in out


def test_a_repeated_command_skips_the_runs_out_holds(gigpo, tmp_path, capsys, monkeypatch):
    import rlvr.pipeline.rlvr_pipeline as rlvr_pipeline

    def no_pipeline(cfg):
        raise AssertionError(f"a run was started: {cfg.run.name}")

    monkeypatch.setattr(rlvr_pipeline, "RLVRPipeline", no_pipeline)  # a fake: this test is about the skipping
    out = tmp_path / "gigpo.jsonl"
    held = [row("gigpo", 0, [0.2, 0.4], 0.5), row("multi_step_grpo", 0, [0.2, 0.2], 0.3),
            row("gigpo", 1, [0.2, 0.4, 0.5], 0.5)]  # another length: not the same run, and not returned
    out.write_text("".join(json.dumps(r) + "\n" for r in held))
    args = SimpleNamespace(out=str(out), steps=2, seeds=1, group=8, prompts=8, engine="vllm", eval_every=None)
    assert gigpo.train_runs(args) == held[:2]
    assert capsys.readouterr().out.count("skipped") == 2
    args.seeds = 2  # seed 1 of 2 steps is not there: the command would start it
    with pytest.raises(AssertionError, match="a run was started: gigpo-s1"):
        gigpo.train_runs(args)
