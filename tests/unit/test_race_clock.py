"""bench/race.py's clock and tables: a mark is due only on the training clock (time spent saving a mark is off it),
the run ends at the last mark, and the time to a target is the first saved weights at or above it; --resume skips
only whole seeds."""

from __future__ import annotations

import json

import pytest

from tests.helpers.bench_modules import load_bench


@pytest.fixture(scope="module")
def race():
    return load_bench("race")


class FakeTime:
    def __init__(self):
        self.now = 1000.0

    def perf_counter(self):
        return self.now


def test_marks_are_due_on_the_training_clock_and_saving_is_off_it(race, tmp_path, monkeypatch):
    fake = FakeTime()
    monkeypatch.setattr(race, "time", fake)
    clock = race.RaceClock(budget_s=100, marks=2, out=tmp_path, name="x-s1")
    fake.now += 49
    assert not clock.due()
    fake.now += 2
    assert clock.due()
    with clock.saving(step=3) as directory:
        fake.now += 30  # saving: not training time
    assert directory == tmp_path / "x-s1-m01"
    assert clock.elapsed() == pytest.approx(51) and not clock.due()
    fake.now += 48
    assert not clock.due()  # 99 s of training, though 129 s have passed
    fake.now += 2
    with pytest.raises(race.BudgetSpent):
        with clock.saving(step=7):
            fake.now += 5
    saved = json.loads((tmp_path / "x-s1.json").read_text())
    assert [(m["mark"], m["mark_s"], m["step"]) for m in saved] == [(1, 50.0, 3), (2, 100.0, 7)]
    assert [m["elapsed_s"] for m in saved] == pytest.approx([51, 101])
    assert [m["save_s"] for m in saved] == pytest.approx([30, 5])


def _marks(values, elapsed):
    return [{"mark": k + 1, "elapsed_s": e, "val_correct/all/mean": v} for k, (v, e) in enumerate(zip(values, elapsed))]


def test_time_to_a_target_is_the_first_saved_weights_at_or_above_it(race):
    marks = _marks([0.40, 0.52, 0.45, 0.60], [130, 250, 370, 490])
    assert race.time_to(marks, 0.475) == 250  # a later dip does not move it
    assert race.time_to(list(reversed(marks)), 0.575) == 490  # by mark, not by list order
    assert race.time_to(marks, 0.70) is None


def test_tables_give_each_framework_its_times_and_the_ratio(race, capsys):
    records = [{"framework": "base", "seed": 1, "mark": 0, "elapsed_s": 0.0, "val_correct/all/mean": 0.375}]
    for seed in (1, 2):
        for fw, elapsed in (("rlvr", [120, 240, 360]), ("trl", [130, 250, 370])):
            values = [0.48, 0.58, 0.60] if fw == "rlvr" else [0.40, 0.49, 0.50]
            for m in _marks(values, elapsed):
                records.append({"framework": fw, "seed": seed, "mark_s": 120.0 * m["mark"], "step": m["mark"], **m})
    capsys.readouterr()
    race.tables(records)
    out = capsys.readouterr().out
    ten = next(line for line in out.splitlines() if line.startswith("min to base + 0.10"))
    assert "2.00 (2/2 seeds)" in ten and "4.17 (2/2 seeds)" in ten and "0.48x" in ten
    twenty = next(line for line in out.splitlines() if line.startswith("min to base + 0.20"))
    assert "4.00 (2/2 seeds)" in twenty and "-" in twenty.split("seeds)")[1]
    end = next(line for line in out.splitlines() if line.startswith("val_correct at budget end"))
    assert "0.600 +- 0.000" in end and "0.500 +- 0.000" in end


def test_per_seed_rows_give_each_seed_its_curve_and_its_own_ratio(race, capsys):
    """Seeds that disagree (rlvr first in seed 1, TRL in seed 2) each show their own ratio; a seed that never
    reaches the target shows '-' and no ratio."""
    records = [{"framework": "base", "seed": 1, "mark": 0, "elapsed_s": 0.0, "val_correct/all/mean": 0.375}]
    curves = {(1, "rlvr"): [0.48, 0.50], (1, "trl"): [0.40, 0.49], (2, "rlvr"): [0.40, 0.48],
              (2, "trl"): [0.50, 0.52], (3, "rlvr"): [0.40, 0.41], (3, "trl"): [0.50, 0.52]}
    for (seed, fw), values in curves.items():
        for m in _marks(values, [120, 240]):
            records.append({"framework": fw, "seed": seed, "mark_s": 120.0 * m["mark"], "step": 3 * m["mark"], **m})
    capsys.readouterr()
    race.tables(records)
    lines = capsys.readouterr().out.splitlines()
    rows = {tuple(line.split()[1:3]): line for line in lines if line.startswith("seed ")}
    assert rows[("1", "rlvr")].split("|")[0].split()[3:] == ["0.480", "0.500"]
    assert rows[("1", "rlvr")].split("|")[1].strip() == "6" and rows[("1", "rlvr")].endswith("2.00")
    assert "0.50x" in rows[("1", "ratio")] and "2.00x" in rows[("2", "ratio")]
    assert rows[("3", "rlvr")].endswith("-") and ("3", "ratio") not in rows


def test_resume_counts_a_seed_only_when_every_framework_ran_the_same_race(race):
    """--resume skips a seed only when each framework's last mark is there at the same budget and number of marks;
    a seed cut short (TRL never ran) or run with another budget runs again."""
    def last(framework, seed, budget_s=1200.0, marks=10):
        return {"framework": framework, "seed": seed, "mark": marks, "mark_s": budget_s}

    records = [{"framework": "base", "seed": 1, "mark": 0},
               last("rlvr", 1), last("trl", 1),                                  # whole
               last("rlvr", 2),                                                  # TRL missing
               last("rlvr", 3, budget_s=480.0, marks=4), last("trl", 3, budget_s=480.0, marks=4)]  # an 8-min race
    assert race.finished_seeds(records, ["rlvr", "trl"], 1200.0, 10) == {1}
    assert race.finished_seeds(records, ["rlvr"], 1200.0, 10) == {1, 2}
    assert race.finished_seeds(records, ["rlvr", "trl"], 480.0, 4) == {3}
    assert race.finished_seeds([], ["rlvr", "trl"], 1200.0, 10) == set()


def test_a_labelled_sweep_point_resumes_apart_from_the_plain_race(race):
    """`--label lr2e-6` names the records "trl lr2e-6": loaded beside the plain race they are a column of their own,
    and --resume counts only the labelled runs, not the plain race's seeds of the same budget."""
    assert race.labelled("trl", "lr2e-6") == "trl lr2e-6" and race.labelled("trl", None) == "trl"
    records = [{"framework": "trl", "seed": 1, "mark": 10, "mark_s": 1200.0},
               {"framework": "trl lr2e-6", "seed": 2, "mark": 10, "mark_s": 1200.0}]
    assert race.finished_seeds(records, [race.labelled("trl", "lr2e-6")], 1200.0, 10) == {2}
