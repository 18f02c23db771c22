"""`python -m rlvr.eval`, as a user runs it after training: a run's checkpoint scored with the run's config
answers the validation prompts exactly as the run's own last validation did (greedy, the HF engine in fp32, the
same schedulers and reward workers), the base model beside it in one command (scored by the same engine, its
weights loaded in place), and each model's best and worst answers in one report; mistakes are one-line errors
before anything starts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.at_once import run_at_once
from tests.lifecycle.cli_runs import records, write_config

pytestmark = pytest.mark.slow


def val_rows(path: Path, step: int) -> dict[str, str]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return {r["prompt"]: r["response"] for r in rows if r["step"] == step}


def rlvr_eval(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlvr.eval", *args], capture_output=True, text=True,
                          timeout=timeout_s)


def test_a_checkpoint_scores_as_its_run_did_beside_the_base_model(finished_cli_run, tiny_model_dir):
    """On the suite's shared finished run (tests/conftest.py): its last checkpoint, step 3, and the base model."""
    assert finished_cli_run.exit_code == 0, finished_cli_run.log_tail
    config, run = finished_cli_run.config, finished_cli_run.run_dir
    final = [r for r in records(run) if r["step"] == 3 and "val_correct/all/mean" in r][-1]

    proc = rlvr_eval("--config", str(config), "--model", str(run), "--model", tiny_model_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out_dir = Path(re.search(r"^eval directory: (.+)$", proc.stdout, re.M).group(1))
    trained_dir, base_dir = out_dir / f"{run.name}-step3", out_dir / Path(tiny_model_dir).name
    # the trained model's answers are the run's last validation's, prompt by prompt
    assert val_rows(trained_dir / "val_samples.jsonl", 0) == val_rows(run / "val_samples.jsonl", 3)
    scored = json.loads((trained_dir / "metrics.jsonl").read_text())
    assert scored["val_correct/all/mean"] == final["val_correct/all/mean"]
    # the base model's, as the run's validation before training: its weights loaded into the engine that scored the
    # checkpoint (the two differ only in weights), which then answers as an engine started on the base model
    stages = [line for line in proc.stderr.splitlines() if "ready: " in line]  # the console's start-up lines
    assert sum("ready: actor_infer on" in line for line in stages) == 1, stages
    assert sum("into the running actor_infer" in line for line in stages) == 1, stages
    assert val_rows(base_dir / "val_samples.jsonl", 0) == val_rows(run / "val_samples.jsonl", 0)
    # the side-by-side table: a column per model, a row per domain and `all`
    table = proc.stdout[proc.stdout.index("val_correct "):].splitlines()
    assert table[0].split() == ["val_correct", trained_dir.name, base_dir.name]
    assert [line.split()[0] for line in table[1:4]] == ["arithmetic", "word_problems", "all"]
    assert float(table[3].split()[1]) == pytest.approx(final["val_correct/all/mean"], abs=5e-4)
    page = (out_dir / "report" / "index.html").read_text()
    assert page.count("Validation samples") == 2 and page.count("validation only, of") == 2
    assert json.loads((trained_dir / "evaluated.json").read_text())["model"] == str(run)


MISTAKES = [("{tmp}/nowhere", "model.path"), ("{run}:7", "no checkpoint of step 7"),
            ("{tmp}/plain:3", "is not a run directory")]


def test_mistakes_stop_before_anything_starts(tiny_model_dir, tmp_path):
    """Each mistake ends the command with exit 2 and one line naming it, before anything is created. The three
    commands run at once: each is ~5 s of imports before its check, one after the other 15 s of the suite."""
    config = write_config(tmp_path, tiny_model_dir, "e")
    run = tmp_path / "runs" / "done-20261126-000000-000"
    (run / "checkpoints" / "step_000002").mkdir(parents=True)
    (run / "checkpoints" / "step_000002" / "driver.json").write_text("{}")
    (tmp_path / "plain").mkdir()
    done = run_at_once({expected: [sys.executable, "-m", "rlvr.eval", "--config", str(config), "--model",
                                   model.format(tmp=tmp_path, run=run)] for model, expected in MISTAKES}, 120)
    for expected, proc in done.items():
        err = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(err) == 1 and expected in err[0], (expected, proc.stderr[-2000:])
    assert not list((tmp_path / "runs").glob("eval-*")), "nothing may be created before the checks pass"
