"""`--dry-run`: everything a run checks before it starts, and nothing it starts.

Validates the config (done by loading it), imports every reward worker class, loads and tokenises the data as the
run would, and prints per domain the rows found, the prompts dropped for length, the quota per step, and the
actors and processes the run would ask Ray for. Ray is never initialised; no run directory is created.
"""

from __future__ import annotations

from rlvr.cli.describe import header_lines, quota_per_step, resource_lines
from rlvr.config.root import Config


def dry_run(cfg: Config) -> str:
    import torch
    from transformers import AutoTokenizer

    from rlvr.envs.base import check_args, resolve_env_class
    from rlvr.models.default_model import resolve_model_path
    from rlvr.pipeline.build import load_domain_data
    from rlvr.workers.rewards.reward_actor import resolve_reward_class

    for domain, dc in cfg.domains.items():  # a bad import path is an error naming the key
        if dc.env is not None:
            check_args(domain, resolve_env_class(domain, dc.env), dc.env)
        else:
            resolve_reward_class(domain, dc.reward)
    model_path = resolve_model_path(cfg.model.path, cfg.model.cache_dir)
    data = load_domain_data(cfg, AutoTokenizer.from_pretrained(model_path))
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
