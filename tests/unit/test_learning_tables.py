"""bench/learning.py's seed table: one seed prints bare values and no difference in standard errors (a standard
error of 0 would claim a precision one run cannot show); several seeds print mean +- SE and the difference.
`--resume` skips the runs already in --out."""

from __future__ import annotations

import json

import pytest

from tests.helpers.bench_modules import load_bench


@pytest.fixture(scope="module")
def learning():
    return load_bench("learning")


def run(start: float, end: float) -> dict[int, dict]:
    return {0: {"val_correct/all/mean": start, "time/step": 10.0},
            1: {"val_correct/all/mean": end, "time/step": 12.0, "time/val": 2.0}}


def final_rows(text: str) -> dict[str, list[str]]:
    rows = [l.strip("|").split("|") for l in text.splitlines() if l.startswith("| a ") or l.startswith("| b ")]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows if len(cells) == 7}


def test_one_seed_prints_bare_values_and_no_z(learning, capsys):
    learning.seed_tables(None, {"a": {1: run(0.5, 0.6)}, "b": {1: run(0.5, 0.7)}})
    rows = final_rows(capsys.readouterr().out)
    assert rows["b"] == ["1", "0.500", "0.700", "+0.100", "n/a", "10.0"]


def test_three_seeds_print_mean_se_and_the_difference_in_pooled_se(learning, capsys):
    learning.seed_tables(None, {"a": {s: run(0.5, v) for s, v in zip((1, 2, 3), (0.5, 0.6, 0.7))},
                                "b": {s: run(0.5, v) for s, v in zip((1, 2, 3), (0.7, 0.8, 0.9))}})
    rows = final_rows(capsys.readouterr().out)
    # se = 0.1 / sqrt(3) each, pooled sqrt(2) * 0.0577 = 0.0816; difference 0.2 -> +2.45
    assert rows["b"] == ["3", "0.500 +- 0.000", "0.800 +- 0.058", "+0.200", "+2.45", "10.0"]
    assert rows["a"][2:4] == ["0.600 +- 0.058", "+0.000"]


def test_resume_skips_only_the_runs_of_the_same_length(learning, tmp_path):
    """A sweep repeated with --resume skips (variant, seed) pairs --out holds with the same number of steps; a
    run of another length, or of another seed, is run again."""
    out = tmp_path / "runs.jsonl"
    rows = [{"variant": "grpo", "seed": 1, "records": {"0": {}, "4": {}, "8": {}}},
            {"variant": "grpo", "seed": 2, "records": {"0": {}, "2": {}}},  # a 2-step run
            {"variant": "dapo", "seed": None, "records": {"0": {}, "8": {}}}]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert learning.finished_runs(str(out), 8) == {("grpo", 1), ("dapo", None)}
    assert learning.finished_runs(str(out), 2) == {("grpo", 2)}
    assert learning.finished_runs(str(tmp_path / "absent.jsonl"), 8) == set()
    assert learning.finished_runs(None, 8) == set()
