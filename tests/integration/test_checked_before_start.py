"""Every mistake a user can make in a config, an override, a data file, a model path, a reward argument, a judge or
sandbox setting or a resume target stops `python -m rlvr.start` before anything starts: exit 2, at most 3 lines on
stderr naming the key and where its value came from (the file, with its path, or the override), no traceback, no
run directory, no Ray. One case per row of docs/config.md's "Checked before start" table (rlvr/config/checks.py);
each runs through the CLI's main() (with --dry-run, and a few without it: the real run checks the same way first)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import ray
import yaml

from rlvr.cli.start import main
from rlvr.config.checks import CHECKS
from rlvr.pipeline import checkpoint
from rlvr.telemetry import console
from tests.conftest import REPO

MATH = REPO / "configs/math.yaml"
MIX = REPO / "configs/math_code_mix.yaml"


@pytest.fixture
def bad_files(tmp_path: Path) -> Path:
    (tmp_path / "malformed.jsonl").write_text('{"prompt": "1+1", "ground_truth": "2", "domain": "arithmetic"}\n'
                                              "{bad json\n")
    (tmp_path / "noprompt.jsonl").write_text('{"question": "1+1", "ground_truth": "2", "domain": "arithmetic"}\n')
    (tmp_path / "notamodel").mkdir()
    (tmp_path / "runs" / "math-v2-20260101-000000-000" / "checkpoints" / "step_000002").mkdir(parents=True)
    (tmp_path / "runs" / "math-v2-20260101-000000-000" / "checkpoints" / "step_000002" / "driver.json").write_text(
        json.dumps({"step": 2}))
    older = tmp_path / "runs" / "math-v2-20260101-000000-000" / "checkpoints" / "step_000001"
    older.mkdir()
    (older / "driver.json").write_text(json.dumps({"step": 1}))
    (older / checkpoint.NO_OPTIMIZER).write_text("")  # as run.keep_optimizer=last leaves an older checkpoint
    return tmp_path


def config_file_with(tmp_path: Path, base: Path, edit) -> Path:
    """A copy of `base` with `edit(tree)` applied (its data paths made absolute), so the file is what is wrong."""
    tree = yaml.safe_load(base.read_text())
    tree["data"]["train_files"] = [str(REPO / f) for f in tree["data"]["train_files"]]
    tree["data"]["val_files"] = [str(REPO / f) for f in tree["data"]["val_files"]]
    edit(tree)
    path = tmp_path / f"edited_{base.name}"
    path.write_text(yaml.safe_dump(tree))
    return path


def run_cli(config: Path, overrides: list[str], capsys, dry_run: bool = True) -> tuple[int, str]:
    try:
        code = main(["--config", str(config), *(["--dry-run"] if dry_run else []), *overrides])
    finally:
        console.uninstall()
    return code, capsys.readouterr().err


# (id, config, overrides ({tmp} is the test's directory), the key named, a fragment of the message)
CASES = [
    ("missing data file", MATH, ["data.train_files=[{tmp}/nope.jsonl]"], "data.train_files", "no such file"),
    ("malformed JSON line", MATH, ["data.train_files=[{tmp}/malformed.jsonl]", "data.bad_rows=error"],
     "data.train_files", "not valid JSON"),
    ("row without a prompt", MATH, ["data.val_files=[{tmp}/noprompt.jsonl]", "data.bad_rows=error"],
     "data.val_files", "no prompt"),
    ("a domain left without rows", MATH, ["data.train_files=[{tmp}/noprompt.jsonl]"],
     "data.train_files", "no usable training rows route to domain 'arithmetic'"),
    ("model path missing", MATH, ["model.path={tmp}/nomodel"], "model.path", "does not exist"),
    ("model dir without config.json", MATH, ["model.path={tmp}/notamodel"], "model.path", "has no config.json"),
    ("misspelt reward argument", MATH, ["domains.arithmetic.reward.args.answer_fallbak=none"],
     "domains.arithmetic.reward.args.answer_fallbak", "did you mean 'answer_fallback'"),
    ("reward argument value not a choice", MATH, ["domains.arithmetic.reward.args.answer_fallback=bogus"],
     "domains.arithmetic.reward.args.answer_fallback", "'last_number' or 'none'"),
    ("reward argument of the wrong type", MATH, ["domains.word_problems.reward.args.pool_size=two"],
     "domains.word_problems.reward.args.pool_size", "valid integer"),
    ("argument the pipeline sets", MATH, ["domains.arithmetic.reward.args.domain=x"],
     "domains.arithmetic.reward.args.domain", "set by the pipeline"),
    ("reward worker not importable", MATH, ["domains.arithmetic.reward.worker=rlvr.nope.Worker"],
     "domains.arithmetic.reward.worker", "cannot import"),
    ("judge parse_mode", MIX, ["domains.judge.reward.args.parse_mode=yes_noo"],
     "domains.judge.reward.args.parse_mode", "'yes_no_logprobs'"),
    ("sandbox kind", MIX, ["domains.code.reward.args.sandbox=htp"], "domains.code.reward.args.sandbox",
     "'local' or 'http'"),
    ("judge server model", MIX, ["judge_server.model={tmp}/nojudge"], "judge_server.model", "does not exist"),
    ("resume path that is no checkpoint", MATH, ["run.resume={tmp}"], "run.resume", "no driver.json"),
    ("resume from a checkpoint without its optimizer state", MATH,
     ["run.resume={tmp}/runs/math-v2-20260101-000000-000/checkpoints/step_000001"], "run.resume",
     "no optimizer state to resume from"),
    ("resume latest with nothing to resume", MATH, ["run.resume=latest", "run.output_dir={tmp}/runs"],
     "run.resume", "no checkpoint under"),
    ("resume latest does not take another run's checkpoint", MATH,
     ["run.resume=latest", "run.output_dir={tmp}/runs", "run.name=math"], "run.resume", "no checkpoint under"),
    ("group estimator with one response per prompt", MATH, ["rollout.group_size=1"], "rollout.group_size",
     "every advantage is 0"),
    ("override adds an unknown domain", MATH, ["rollout.domain_interleave_probs.bogus=0.5"],
     "rollout.domain_interleave_probs", "exactly the configured domains"),
    ("override under an unknown section", MATH, ["foo.bar=1"], "foo", "unknown key"),
    ("unknown key", MATH, ["rollout.group_sise=4"], "rollout.group_sise", "unknown key"),
]


def test_every_row_of_the_documented_table_has_a_case():
    assert [c[0] for c in CASES] and {c[0] for c in CASES} == {check for check, _, _ in CHECKS}


@pytest.mark.parametrize("config,overrides,key,fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_mistake_stops_the_dry_run_in_one_line_naming_key_and_override(
        config, overrides, key, fragment, bad_files, capsys, monkeypatch):
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("Ray was started"))
    argv = [o.replace("{tmp}", str(bad_files)) for o in overrides]
    code, err = run_cli(config, argv + [f"run.output_dir={bad_files}/runs"] * ("run.output_dir" not in str(argv)),
                        capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) <= 3 and "Traceback" not in err, err
    assert f"{key}: " in err and fragment in err, err
    blamed = [o for o in argv if o.split("=")[0] == key or o.split("=")[0].startswith(key + ".")
              or key.startswith(o.split("=")[0] + ".")]
    if blamed:  # the override that set the key (or a key below or above it) is the one named
        assert f"override '{blamed[-1]}'" in err, err
    assert sorted(p.name for p in (bad_files / "runs").iterdir()) == ["math-v2-20260101-000000-000"]


@pytest.mark.parametrize("edit,key,fragment", [
    (lambda t: t["domains"]["arithmetic"]["reward"]["args"].update(answer_fallback="bogus"),
     "domains.arithmetic.reward.args.answer_fallback", "'last_number' or 'none'"),
    (lambda t: t["model"].update(path="/nonexistent/model"), "model.path", "does not exist"),
    (lambda t: t["rollout"].update(group_size=1), "rollout.group_size", "every advantage is 0"),
], ids=["reward argument", "model path", "group size"])
def test_a_mistake_in_the_file_names_the_file(edit, key, fragment, tmp_path, capsys):
    path = config_file_with(tmp_path, MATH, edit)
    code, err = run_cli(path, [f"run.output_dir={tmp_path}/runs"], capsys)
    assert code == 2 and f"{path}: " in err and f"{key}: " in err and fragment in err, err
    assert "override" not in err


@pytest.mark.parametrize("overrides,key", [
    (["data.train_files=[{tmp}/nope.jsonl]"], "data.train_files"),
    (["domains.arithmetic.reward.args.answer_fallback=bogus"], "domains.arithmetic.reward.args.answer_fallback"),
    (["run.resume=latest", "run.name=math"], "run.resume"),
], ids=["data", "reward argument", "resume"])
def test_a_real_run_stops_the_same_way_before_it_creates_anything(overrides, key, bad_files, capsys, monkeypatch):
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("Ray was started"))
    argv = [o.replace("{tmp}", str(bad_files)) for o in overrides] + [f"run.output_dir={bad_files}/runs"]
    code, err = run_cli(MATH, argv, capsys, dry_run=False)
    assert code == 2 and f"{key}: " in err and len(err.strip().splitlines()) <= 3, err
    assert sorted(p.name for p in (bad_files / "runs").iterdir()) == ["math-v2-20260101-000000-000"]
