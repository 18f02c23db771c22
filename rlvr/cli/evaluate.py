"""`python -m rlvr.eval --config C --model M [--model M2 ...] [key=value ...]`: validation only, of any model.

M is a Hugging Face model directory (an `rlvr.export` output, the base model), a model name (the embedded
default), a run directory (its latest checkpoint) or `RUN:STEP`, or a checkpoint directory. Each model is scored
on the config's validation data with the config's domains, rewards and validation settings (greedy by default),
through the same schedulers and reward workers as a training run's validation (rlvr/pipeline/validation.py). The
servers and reward workers start once for all models; the inference engine too, where a model differs from the
one before only in its weights (a run's checkpoints, the base model beside them: its weights are loaded into the
running engine, rlvr/pipeline/eval_weights.py); a model that differs in more gets an engine of its own.

Writes `runs/eval-<time>/`: a run directory per model (config.yaml, metrics.jsonl, val_samples.jsonl) and
`report/` (index.html with each model's best and worst answers); prints val_correct per domain, the models side by
side.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

from rlvr.cli.export import ExportError, checkpoint_of, export
from rlvr.cli.start import config_error
from rlvr.config.base import ConfigError
from rlvr.config.load import load_config
from rlvr.config.root import Config


def model_source(spec: str) -> tuple[str, Path | None]:
    """(what to pass as model.path, or None for a checkpoint; the checkpoint directory, or None)."""
    run, step = spec, "latest"
    if not Path(spec).exists() and re.search(r":(\d+|latest)$", spec):
        run, step = spec.rsplit(":", 1)
    path = Path(run)
    if (path / "driver.json").exists() or (path / "checkpoints").is_dir():
        return "", checkpoint_of(path, step)
    if step != "latest" or run != spec:
        raise ExportError(f"--model {spec}: {run} is not a run directory (RUN:STEP names a run's checkpoint)")
    return spec, None


def label_of(spec: str, checkpoint: Path | None, taken: set[str]) -> str:
    if checkpoint is not None:
        base = f"{checkpoint.parent.parent.name}-step{int(checkpoint.name.removeprefix('step_'))}"
    else:
        base = Path(spec).name or spec
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", base)
    label, n = base, 2
    while label in taken:
        label, n = f"{base}-{n}", n + 1
    taken.add(label)
    return label


def side_by_side(labels: list[str], metrics: list[dict[str, float]]) -> str:
    """val_correct per domain (rows) and model (columns), `all` last."""
    domains = sorted({k.split("/")[1] for m in metrics for k in m
                      if k.startswith("val_correct/") and k.split("/")[1] != "all"}) + ["all"]
    width = max(len(d) for d in domains + ["val_correct"])
    cols = [max(len(label), 5) for label in labels]
    lines = ["  ".join(["val_correct".ljust(width)] + [label.rjust(c) for label, c in zip(labels, cols)])]
    for d in domains:
        values = [m.get(f"val_correct/{d}/mean") for m in metrics]
        lines.append("  ".join([d.ljust(width)] + [("n/a" if v is None else f"{v:.3f}").rjust(c)
                                                    for v, c in zip(values, cols)]))
    return "\n".join(lines)


def eval_config(config: str, overrides: list[str], model_path: str | None) -> Config:
    """The config as the user gave it, with the model to score; actor_infer stands alone (no trainer to join)."""
    extra = ["placement.actor_infer.colocate_with=null"] + ([f"model.path={model_path}"] if model_path else [])
    return load_config(config, overrides + extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlvr.eval", description=__doc__.split("\n\n")[0],
                                     epilog="Validation settings (validation.*: temperature, max_prompts_per_domain) "
                                     "and every other key: docs/config.md.")
    parser.add_argument("--config", required=True, help="YAML config whose domains, rewards and validation data "
                        "score the models, e.g. configs/math.yaml")
    parser.add_argument("--model", action="append", required=True, metavar="MODEL",
                        help="a model directory or name, a run directory, RUN:STEP, or a checkpoint directory; "
                        "repeat to compare models side by side")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. validation.max_prompts_per_domain=64")
    parser.add_argument("--verbose", action="store_true", help="also show third-party logs on the console")
    args = parser.parse_args(argv)
    from rlvr.telemetry import console

    console.install(verbose=args.verbose)
    scratch = Path(tempfile.mkdtemp(prefix="rlvr-eval-"))
    try:
        return _evaluate_all(args, scratch)
    except ConfigError as err:
        return config_error(err, args)
    except ExportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: the evaluation and everything it started are stopped", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _evaluate_all(args, scratch: Path) -> int:
    from rlvr.lifecycle.guardian import guard_path
    from rlvr.pipeline.build import new_run_dir
    from rlvr.pipeline.preflight import preflight
    from rlvr.telemetry import console

    guard_path(str(scratch))  # the exported checkpoints, also when this process is killed
    taken: set[str] = set()
    models = []
    for spec in args.model:  # every model and config checked before anything starts
        model_path, checkpoint = model_source(spec)
        label = label_of(spec, checkpoint, taken)
        if checkpoint is not None:
            model_path = str(export(checkpoint, scratch / label))
        cfg = eval_config(args.config, args.overrides, model_path)
        source = {"model": spec, "checkpoint": str(checkpoint) if checkpoint else None}
        models.append((label, cfg, preflight(cfg), source))
    from rlvr.pipeline.validation import Evaluator
    from rlvr.report import build_report

    first = models[0][1]
    out_dir = new_run_dir(first.model_copy(update={"run": first.run.model_copy(update={"name": "eval"})}))
    console.start_run(first, out_dir)
    evaluator = Evaluator(first, out_dir)
    results = []
    try:
        for label, cfg, checked, source in models:
            console.say(f"{label}: {checked.model_path}")
            results.append(evaluator.evaluate(cfg, checked, out_dir / label, source))
    finally:
        evaluator.close()
    labels = [label for label, *_ in models]
    report = build_report([out_dir / label for label in labels], out_dir / "report")
    print(side_by_side(labels, results))
    print(f"report: {report.index}")
    print(f"eval directory: {out_dir}")
    return 0
