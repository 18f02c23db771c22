"""What a run checks before it starts anything, as one table: rendered into docs/config.md ("Checked before
start") and matched row by row by tests/integration/test_checked_before_start.py (each row's id is a test id).

Where each check lives: the config's own validation (rlvr/config/), the checks that need files, models and worker
classes (rlvr/pipeline/preflight.py). Both run in `--dry-run` and at the very start of a run, before any
directory, process or server exists; the CLI prints one line naming the key and the file or override that set it
and exits 2.
"""

from __future__ import annotations

# (test id, key named in the error, what is checked)
CHECKS: list[tuple[str, str, str]] = [
    ("unknown key", "the key", "every key exists (YAML file and overrides); a misspelt override is named"),
    ("override under an unknown section", "the section", "an override below an unknown section blames that "
     "override, not the file"),
    ("override adds an unknown domain", "rollout.domain_interleave_probs", "probabilities name exactly the "
     "configured domains (checked before their sum)"),
    ("group estimator with one response per prompt", "rollout.group_size", "estimators that compare a prompt's "
     "responses (grpo, dr_grpo, rloo, reinforce_pp_baseline, gigpo, multi_step_grpo) get at least 2"),
    ("missing data file", "data.train_files / data.val_files", "every data file exists and has a known format"),
    ("malformed JSON line", "data.train_files / data.val_files", "with `data.bad_rows: error`, the first bad row "
     "(file and line); with `skip` bad rows are counted and named"),
    ("row without a prompt", "data.train_files / data.val_files", "each row has a prompt, an answer and a domain"),
    ("a domain left without rows", "data.train_files", "every domain with a probability above 0 has training rows"),
    ("model path missing", "model.path", "the model is a local Hugging Face directory or the embedded default"),
    ("model dir without config.json", "model.path", "the directory holds a model (config.json)"),
    ("judge server model", "judge_server.model", "the embedded judge's model, when an LLM-judge domain asks for it"),
    ("misspelt reward argument", "domains.<d>.reward.args.<name>", "every argument is a parameter of the worker "
     "(the closest name suggested); the same for env arguments"),
    ("reward argument value not a choice", "domains.<d>.reward.args.<name>", "a value fits the parameter's "
     "annotation, `Literal` choices included (e.g. `answer_fallback`)"),
    ("reward argument of the wrong type", "domains.<d>.reward.args.<name>", "types are checked strictly "
     "(a string is not an int)"),
    ("argument the pipeline sets", "domains.<d>.reward.args.<name>", "`domain` and `limits` come from the "
     "pipeline, not from args"),
    ("reward worker not importable", "domains.<d>.reward.worker", "the import path names a RewardWorker subclass"),
    ("judge parse_mode", "domains.<d>.reward.args.parse_mode", "the judge's parse mode is one it knows"),
    ("sandbox kind", "domains.<d>.reward.args.sandbox", "the code reward's sandbox is `local` or `http`"),
    ("resume path that is no checkpoint", "run.resume", "a path given is a checkpoint directory (driver.json)"),
    ("resume latest with nothing to resume", "run.resume", "`latest` finds a checkpoint of this run name"),
    ("resume from a checkpoint without its optimizer state", "run.resume", "the checkpoint still holds its "
     "optimizer state (`run.keep_optimizer: last` keeps it only in the newest)"),
    ("resume latest does not take another run's checkpoint", "run.resume", "`latest` matches the run name "
     "exactly (`math` never resumes `math-v2`)"),
]


def checks_table() -> list[str]:
    rows = ["| check | key named | what |", "|---|---|---|"]
    return rows + [f"| {check} | `{key}` | {what} |" for check, key, what in CHECKS]
