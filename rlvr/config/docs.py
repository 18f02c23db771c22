"""docs/config.md, generated from the config models: every key with its type, default, bounds and meaning.

    python -m rlvr.config.docs            # rewrite docs/config.md
    python -m rlvr.config.docs --check    # exit 1 if docs/config.md is out of date (tests/unit/test_config_docs.py)

The meaning of a key is the comment written beside it (or in the lines right above it) in the section modules
of rlvr/config/, and a section's is its class docstring; keys without a comment there take theirs from MEANINGS
below. So a new key documents itself by its comment, and
this command puts it in the reference.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import io
import sys
import textwrap
import tokenize
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from rlvr.algorithms.presets import PRESETS
from rlvr.config.checks import checks_table
from rlvr.config.root import Config

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "config.md"
COMMAND = "python -m rlvr.config.docs"

# Meanings of keys that have no comment in rlvr/config/ (a comment there takes precedence).
MEANINGS: dict[str, str] = {
    "run.output_dir": "directory under which each run creates `<name>-<time>/`",
    "run.seed": "seed of every random choice (data order, sampling, initialisation): same config + seed = same run",
    "run.max_steps": "training steps (one rollout and one policy update each)",
    "run.keep_checkpoints": "newest checkpoints kept; older ones are deleted",
    "run.keep_optimizer": "all: every kept checkpoint can be resumed from; last: only the newest keeps the "
                          "optimizer state (older ones keep their weights for export and eval)",
    "run.progress_bar": "show the progress bar on the console",
    "trackers.jsonl": "write `metrics.jsonl` in the run directory",
    "trackers.tensorboard": "write TensorBoard events to `tensorboard/` in the run directory",
    "trackers.wandb": "log to Weights & Biases (files in `wandb/` of the run directory)",
    "trackers.wandb_project": "W&B project name",
    "ray.num_cpus": "CPUs of the embedded Ray cluster (None: every core); ignored when joining a cluster",
    "model.cache_dir": "where the embedded default model is prepared (None: ~/.cache/rlvr/models)",
    "data.train_files": "training data files (jsonl, json or parquet); rows are routed to domains",
    "data.val_files": "validation data files, routed like the training rows",
    "data.prompt_key": "column holding a raw text prompt",
    "data.messages_key": "column holding a chat (list of {role, content}); the chat template is applied",
    "data.answer_key": "column holding the ground truth given to the reward worker",
    "data.domain_key": "column naming the row's domain",
    "data.tag_key": "column with a tag that `tag_to_domain` maps to a domain (when the row has no domain column)",
    "data.tag_to_domain": "tag -> domain map for rows routed by `tag_key`",
    "data.id_key": "column with the row's id (else file name and row number)",
    "data.system_prompt": "system message put before every chat prompt",
    "domains": "one entry per domain: `<name>: {reward: {...}}`; every domain needs a reward worker",
    "domains.<name>.reward.world_size": "reward actors for this domain (requests are spread over them)",
    "domains.<name>.reward.max_concurrency": "reward calls in flight per actor (training lane)",
    "domains.<name>.reward.timeout_s": "deadline of one reward call; past it the sample's status is timeout",
    "domains.<name>.reward.max_retries": "retries of a call that failed with a transient error",
    "domains.<name>.reward.retry_backoff_s": "first wait between retries (doubles each time)",
    "rollout.prompts_per_step": "prompts per training step over all domains (split by domain_interleave_probs)",
    "rollout.group_size": "responses sampled per prompt (the group advantages compare)",
    "rollout.domain_interleave_probs": "share of each domain in every step's prompts; exact per-step counts",
    "rollout.filter": "dynamic sampling filters (see the section below)",
    "rollout.filter.min_valid": "groups with fewer validly scored samples than this are dropped",
    "generation.world_size": "actor_infer workers (each with its own engine)",
    "generation.dtype": "weights and compute precision of the generation engine",
    "generation.max_new_tokens": "longest response generated in training",
    "generation.temperature": "sampling temperature in training",
    "generation.top_p": "nucleus sampling threshold (1: off)",
    "generation.top_k": "top-k sampling (0: off)",
    "validation.temperature": "sampling temperature of validation",
    "validation.max_prompts_per_domain": "validation prompts per domain (None: all)",
    "algorithm.adv_estimator": "advantage estimator (rlvr/algorithms/advantages.py)",
    "algorithm.norm_adv_by_std": "divide group-relative advantages by the group's standard deviation",
    "algorithm.clip_eps_low": "PPO ratio clip below 1 (1 - eps)",
    "algorithm.clip_eps_high": "PPO ratio clip above 1 (1 + eps); DAPO's clip-higher raises it",
    "algorithm.dual_clip_c": "dual-clip bound for negative advantages (None: off)",
    "algorithm.loss_agg_mode": "how token losses are aggregated into the batch loss",
    "algorithm.kl_estimator": "KL estimator of the KL loss term",
    "algorithm.entropy_coef": "entropy bonus coefficient",
    "algorithm.overlong_penalty_factor": "scale of the DAPO overlong penalty",
    "algorithm.behaviour_weight_cap": "cap of each token's pi_prox / pi_behaviour weight in the decoupled loss",
    "algorithm.preset": "named preset whose values the other algorithm keys override: " + ", ".join(PRESETS),
    "judge_server.startup_timeout_s": "seconds the judge server may take to become healthy",
}


# ---------------------------------------------------------------------------------------- comments in the source


def source_comments(cls: type) -> dict[str, str]:
    """{field: comment} from a class's source: the comment beside the field (any line of a multi-line field) or
    the comment lines right above it."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    out: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above, line = [], node.lineno - 1
        while line >= 1 and lines[line - 1].strip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        beside = [comments[i] for i in range(node.lineno, node.end_lineno + 1) if i in comments
                  and not lines[i - 1].strip().startswith("#")]
        text = " ".join(above + beside).strip()
        if text:
            out[node.target.id] = text
    return out


def source_annotations(cls: type) -> dict[str, str]:
    source = textwrap.dedent(inspect.getsource(cls))
    return {node.target.id: ast.unparse(node.annotation) for node in ast.parse(source).body[0].body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}


# ---------------------------------------------------------------------------------------- the models


def _nested_model(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """(model, inside a dict) for `Model`, `Model | None` and `dict[str, Model]` annotations."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if get_origin(annotation) is dict:
        model, _ = _nested_model(get_args(annotation)[1])
        return model, model is not None
    for arg in get_args(annotation):
        model, in_dict = _nested_model(arg)
        if model is not None:
            return model, in_dict
    return None, False


def _bounds(info) -> str:
    names = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    out = []
    for meta in info.metadata:
        for attr, sign in names.items():
            value = getattr(meta, attr, None)
            if value is not None:
                out.append(f"{sign} {value}")
    return ", ".join(out)


def _default(info) -> str:
    if info.is_required():
        return "**required**"
    value = info.get_default(call_default_factory=True)
    if value is PydanticUndefined:
        return "**required**"
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, tuple):
        value = list(value)
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()
    return f"`{text}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def sections(model: type[BaseModel] = Config, prefix: str = "") -> list[tuple[str, type[BaseModel], list[list[str]]]]:
    """(section path, model, rows [key, type, default, bounds, meaning]) in declaration order, nested sections
    after their parent."""
    comments, annotations = {}, {}
    for cls in reversed([c for c in model.__mro__ if issubclass(c, BaseModel) and c is not BaseModel]):
        comments.update(source_comments(cls))  # inherited fields (TrainerConfig's) keep their comments
        annotations.update(source_annotations(cls))
    rows, children = [], []
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        nested, in_dict = _nested_model(info.annotation)
        meaning = comments.get(name) or MEANINGS.get(key, "")
        if nested is not None:
            child = f"{key}.<name>" if in_dict else key
            meaning = meaning or f"see [{child}](#{_anchor(child)})"
            children.append((child, nested))
        rows.append([f"`{key}`", f"`{annotations.get(name, '')}`", _default(info), _bounds(info), meaning])
    out = [(prefix.rstrip(".") or "top level", model, rows)]
    for child, nested in children:
        out += sections(nested, child + ".")
    return out


def _anchor(section: str) -> str:
    return "".join(c for c in section.lower().replace(".", "").replace(" ", "-") if c.isalnum() or c in "-_")


def presets_table() -> list[str]:
    keys: list[str] = []
    for preset in PRESETS.values():
        for section, values in preset.items():
            for k, v in _flatten(values, section + ".").items():
                if k not in keys:
                    keys.append(k)
    names = list(PRESETS)
    rows = ["| key | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for key in keys:
        cells = []
        for name in names:
            flat = {k: v for s, vals in PRESETS[name].items() for k, v in _flatten(vals, s + ".").items()}
            cells.append(f"`{yaml.safe_dump(flat[key], default_flow_style=True).strip().removesuffix('...').strip()}`"
                         if key in flat else "")
        rows.append(f"| `{key}` | " + " | ".join(cells) + " |")
    return rows


def _flatten(tree: dict, prefix: str) -> dict[str, Any]:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def render() -> str:
    out = [f"<!-- Generated from rlvr/config/ by `{COMMAND}`; do not edit by hand: change the comment beside the "
           "key in rlvr/config/ (or rlvr/config/docs.py MEANINGS) and rerun the command. -->",
           "# Configuration reference", "",
           "Every key of a run's YAML config, as `section.key`. Unknown keys are errors, and so are values outside "
           "the bounds; each error names the key and whether it came from the file or a `key=value` override. "
           "`python -m rlvr.start --config FILE --print-config` prints a resolved config with the origin of each "
           "value (default, preset, file, override).", "",
           f"Regenerate this file after changing a config model: `{COMMAND}` (checked by "
           "`tests/unit/test_config_docs.py`).", ""]
    all_sections = sections()
    out += ["Sections: " + ", ".join(f"[{s}](#{_anchor(s)})" for s, _, _ in all_sections), ""]
    for section, model, rows in all_sections:
        out += [f"## {section}", ""]
        doc = inspect.getdoc(model) if model.__doc__ and model.__doc__ is not BaseModel.__doc__ else None
        if doc and model is not Config:
            out += [" ".join(doc.split()), ""]
        out += ["| key | type | default | bounds | meaning |", "|---|---|---|---|---|"]
        out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
        out.append("")
    out += ["## Algorithm presets", "",
            "`algorithm: <preset>` (or `algorithm.preset`) sets these values; any key you set yourself wins "
            "(rlvr/algorithms/presets.py).", ""]
    out += presets_table()
    out += ["", "## Checked before start", "",
            "`--dry-run` and every run check these before any directory, process or server exists (rlvr/config/, "
            "rlvr/pipeline/preflight.py); a failure is one line naming the key and the file or override that set "
            "it, exit status 2 (`--verbose` adds the traceback). Each row is a test in "
            "tests/integration/test_checked_before_start.py (rlvr/config/checks.py).", ""]
    out += checks_table()
    return "\n".join(out) + "\n"


def undocumented() -> list[str]:
    return [row[0] for _, _, rows in sections() for row in rows if not row[4]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is out of date, write nothing")
    parser.add_argument("--out", type=Path, default=DOC_PATH)
    args = parser.parse_args(argv)
    text = render()
    missing = undocumented()
    if missing:
        print(f"keys without a meaning (add a comment in rlvr/config/): {', '.join(missing)}", file=sys.stderr)
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is out of date: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

