"""The CLI's tools that start nothing: --dry-run (the default model's tokenizer, the shipped data, no Ray) and
--print-config; and W&B's records of a run (offline), read back from the run's files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ray

from rlvr.cli.dry_run import dry_run
from rlvr.config.load import load_config
from rlvr.pipeline.preflight import preflight
from tests.conftest import REPO

MAIN = REPO / "configs/math_code_mix.yaml"


def test_dry_run_counts_rows_drops_quotas_and_starts_nothing(default_model_dir, tmp_path, monkeypatch):
    cfg = load_config(MAIN, [f"run.output_dir={tmp_path / 'runs'}", "data.max_prompt_length=60",
                             "rollout.prompts_per_step=6"])

    def no_ray(*args, **kwargs):
        raise AssertionError("--dry-run started Ray")

    # ray.init itself, not ray.is_initialized(): an earlier test of the session may hold a cluster in this process
    monkeypatch.setattr(ray, "init", no_ray)
    text = dry_run(cfg, preflight(cfg))
    assert not (tmp_path / "runs").exists()
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.split()[:1] in
            (["math"], ["code"], ["judge"])}
    for domain, row in rows.items():  # every row of the data files is kept or counted as dropped
        kept_train, kept_val, (dropped_train, dropped_val) = int(row[1]), int(row[2]), map(int, row[4].split("/"))
        assert kept_train + dropped_train == rows_of(cfg, cfg.data.train_files, domain)
        assert kept_val + dropped_val == rows_of(cfg, cfg.data.val_files, domain)
        assert row[3] == f"({min(kept_val, cfg.validation.max_prompts_per_domain)})"
    assert rows["math"][4] != "0/0"  # the word problems are longer than 60 tokens with the chat template
    # 6 prompts at 0.5/0.25/0.25: math 3 a step; code and judge alternate 1 and 2 (mean 1.5)
    assert rows["math"][5] == "3" and rows["code"][5:8] == ["1-2", "(mean", "1.50)"]
    assert "judge_server  1 process: smollm2-135m-instruct" in text
    assert "reward/code   1 x CodeSandboxRewardWorker" in text


def rows_of(cfg, files: list[str], domain: str) -> int:
    tags = cfg.data.tag_to_domain
    return sum(tags[json.loads(line)["domain"]] == domain for f in files for line in (REPO / f).read_text().splitlines()
               if line.strip())


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlvr.start", "--config", str(MAIN), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_print_config_cli(tmp_path):
    proc = cli("--print-config", "run.max_steps=2", f"run.output_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    assert "max_steps: 2" in proc.stdout and "# override run.max_steps=2" in proc.stdout
    assert "engine: vllm" in proc.stdout and "# file" in proc.stdout
    assert list(Path(tmp_path).iterdir()) == []


def test_a_bad_override_is_an_error_naming_it_before_anything_starts():
    proc = cli("--dry-run", "rollout.group_sise=4")
    assert proc.returncode == 2
    assert "override 'rollout.group_sise=4': rollout.group_sise: unknown key" in proc.stderr
