"""The run report on synthetic run directories (tests/helpers/run_dirs.py): the summary's numbers, the files
written, a crashed run, two runs overlaid, the CLI."""

from __future__ import annotations

import struct

import pytest

from rlvr.report import RunDirError, build_report, load_run
from rlvr.report.__main__ import main as report_main
from rlvr.report.html_page import best_and_worst
from rlvr.report.plots import PLOTS
from rlvr.report.summary import format_text, summarize
from tests.helpers.run_dirs import write_run


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def test_summary_numbers_by_hand(tmp_path):
    s = summarize(load_run(write_run(tmp_path / "run")))
    rows = {r.domain: r for r in s.rows}
    assert list(rows) == ["math", "code", "all"]
    math, code, overall = rows["math"], rows["code"], rows["all"]
    assert math.val == [(0, 0.25), (2, 0.75), (3, 0.5)] and math.best == (2, 0.75)
    assert code.best == (0, 0.5)  # a tie: the first step that reached it
    assert overall.val == [(0, 0.375), (2, 0.625), (3, 0.5)]
    assert math.reward == [(0, 0.1), (1, 0.2), (2, 0.3)]
    assert math.length_mean == pytest.approx(20.0) and code.length_mean == pytest.approx(40.0)
    assert math.statuses == {"ok": 24, "error": 1, "timeout": 0, "invalid": 0}
    assert s.phases["generate"] == pytest.approx(4.0) and s.phases["train"] == pytest.approx(1.0)
    assert s.phases["val"] == pytest.approx(4.0)  # per validation, not per step
    assert s.tokens_per_s == pytest.approx({"generation": 200.0, "training": 50.0})
    assert s.finished and s.progress == "3/3 steps"


def test_text_table_names_every_domain_with_first_last_best(tmp_path):
    text = format_text(summarize(load_run(write_run(tmp_path / "run"))))
    lines = {line.split()[0]: line for line in text.splitlines() if line.split()}
    assert "0.250 -> 0.500" in lines["math"] and "0.750 (2)" in lines["math"]
    assert "0.000 -> 1.000" in lines["code"] and "24/1/0/0" in lines["math"]
    assert "0.375 -> 0.500" in lines["all"]
    assert "tokens/s: generation 200.0 | training 50.0" in text


def test_each_kept_checkpoint_is_listed_with_its_size(tmp_path):
    run = write_run(tmp_path / "run")
    assert "checkpoints:" not in format_text(summarize(load_run(run)))  # a run that saved none says nothing
    for step, size in ((2, 2_500_000), (4, 1_250_000_000)):
        parts = run / "checkpoints" / f"step_{step:06d}" / "actor_train"
        parts.mkdir(parents=True)
        with open(parts / "model.safetensors", "wb") as f:
            f.truncate(size - 100)  # sparse: the size is what counts
        (parts.parent / "driver.json").write_text("x" * 100)
    (run / "checkpoints" / ".tmp_step_000006").mkdir()  # an interrupted save is not a checkpoint
    text = format_text(summarize(load_run(run)))
    assert "checkpoints: step_000002 2.5 MB | step_000004 1.2 GB" in text.splitlines()
    assert "Checkpoints: step_000002 2.5 MB | step_000004 1.2 GB" in build_report(run).index.read_text()


def test_report_writes_every_plot_and_an_index(tmp_path):
    report = build_report(write_run(tmp_path / "run"))
    assert report.out_dir == tmp_path / "run" / "report"
    assert set(report.images) == set(PLOTS)
    for name, path in report.images.items():
        width, height = png_size(path)
        assert width > 300 and height > 200, name
    page = report.index.read_text()
    for path in report.images.values():
        assert f'src="{path.name}"' in page
    assert '<table class="summary">' in page and "0.750 (2)" in page
    assert "question math 0 &lt;b&gt;" in page  # escaped, never raw HTML from a model's output


def test_best_and_worst_samples_of_the_last_validation(tmp_path):
    run = load_run(write_run(tmp_path / "run"))
    step, best, worst = best_and_worst(run, "math", n=2)
    assert step == 3
    assert [s["correct"] for s in best] == [True, True] and [s["correct"] for s in worst] == [False, False]
    assert not {s["prompt"] for s in best} & {s["prompt"] for s in worst}
    _, best, worst = best_and_worst(run, "math", n=3)  # 4 responses: 2 and 2
    assert len(best) == len(worst) == 2


def test_crashed_run_reports_what_it_has(tmp_path):
    report = build_report(write_run(tmp_path / "run", crashed=True))
    (s,) = report.summaries
    assert not s.finished and s.progress == "stopped after step 3 of 6 (crashed or interrupted)"
    assert any("last line (torn by the crash)" in p for p in s.problems)
    assert {r.domain: r.val[-1] for r in s.rows}["math"] == (2, 0.75)  # the last validation it reached
    assert "val_correct" in report.images and report.index.exists()
    assert "torn by the crash" in report.index.read_text()


def test_run_that_died_before_its_first_step(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("run: {max_steps: 4}\ndomains: {math: {}}\n")
    report = build_report(run_dir)
    (s,) = report.summaries
    assert s.progress == "no training step logged (of 4)"
    assert report.images == {} and "metrics.jsonl is missing" in report.text
    assert "No validation samples" in report.index.read_text()


def test_two_runs_overlaid(tmp_path):
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b", crashed=True)
    report = build_report([a, b])
    assert report.out_dir == a / "report" / "vs-b"
    assert set(report.images) == set(PLOTS)
    page = report.index.read_text()
    assert "[1] a" in page and "[2] b" in page and page.count('<table class="summary">') == 2


def test_cli_prints_the_summary_and_rejects_a_non_run(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    assert report_main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "math" in out and "code" in out and f"report: {run / 'report' / 'index.html'}" in out
    assert report_main([str(tmp_path)]) == 2
    assert "not an rlvr run directory" in capsys.readouterr().err
    with pytest.raises(RunDirError):
        load_run(tmp_path / "missing")
