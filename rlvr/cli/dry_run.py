"""`--dry-run`: everything a run checks before it starts, and nothing it starts.

The checks a run makes before it starts anything (the config, the resume target, the models, every reward and env
argument, the data loaded and tokenised as the run would: rlvr/pipeline/preflight.py) have passed; this prints per
domain the rows found, the prompts dropped for length, the quota per step, and the actors and processes the run
would ask Ray for. Ray is never initialised; no run directory is created.
"""

from __future__ import annotations

from rlvr.cli.describe import header_lines, quota_per_step, resource_lines
from rlvr.config.root import Config
from rlvr.pipeline.preflight import Checked


def dry_run(cfg: Config, checked: Checked) -> str:
    """The summary of a config that passed every check before start (rlvr/pipeline/preflight.py)."""
    import torch

    model_path, data = checked.model_path, checked.data
    quotas = quota_per_step(cfg)
    group, val_cap = cfg.rollout.group_size, cfg.validation.max_prompts_per_domain

    header = ["domain", "train rows", "val rows (used)", "dropped for length train/val", "prompts/step",
              "samples/step"]
    val_files = set(cfg.data.val_files)
    rows = []
    for d in cfg.domains:
        dd, q = data[d], quotas[d]
        used = min(len(dd.val), val_cap) if val_cap else len(dd.val)
        dropped_val = sum(src.rpartition(":")[0] in val_files for src in dd.dropped)  # sources are "file:row"
        samples = f"{q.low * group}" if q.low == q.high else f"{q.low * group}-{q.high * group}"
        rows.append([d, str(len(dd.train)), f"{len(dd.val)} ({used})", f"{len(dd.dropped) - dropped_val}/{dropped_val}",
                     str(q), samples])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    table = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]

    lines = ["dry run: the config is valid, the data loads; nothing was started.", ""]
    lines += [line for line in header_lines(cfg, f"{cfg.run.output_dir}/{cfg.run.name}-<time> (not created)")
              if not line.startswith("run dir")]
    lines += [f"model dir  {model_path}", ""]
    lines += table
    lines += ["", f"per step: {cfg.rollout.prompts_per_step} prompts x {group} responses = "
              f"{cfg.train_batch_size} samples; validation every {cfg.run.eval_every or '-'} steps", "",
              "would request:"]
    lines += ["  " + line for line in resource_lines(cfg, torch.cuda.device_count())]
    return "\n".join(lines)
