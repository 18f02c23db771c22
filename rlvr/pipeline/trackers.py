"""Metric sinks: metrics.jsonl, TensorBoard and W&B (offline unless the user is logged in)."""

from __future__ import annotations

import json
import logging
import math
import os
import uuid
from pathlib import Path
from typing import Any

from rlvr.config import TrackersConfig
from rlvr.pipeline import wandb_extras

log = logging.getLogger(__name__)


def wandb_mode(setting: str) -> str:
    """'auto' means online only when credentials exist (WANDB_API_KEY or a stored login); never a prompt."""
    if setting != "auto":
        return setting
    if os.environ.get("WANDB_MODE") in ("offline", "online", "disabled"):
        return os.environ["WANDB_MODE"]
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    if netrc.exists() and "api.wandb.ai" in netrc.read_text(errors="ignore"):
        return "online"
    return "offline"


class Trackers:
    def __init__(self, cfg: TrackersConfig, run_dir: Path, run_name: str, config: dict[str, Any],
                 run_id: str | None = None):
        self.run_dir = run_dir
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self._jsonl = open(run_dir / "metrics.jsonl", "a") if cfg.jsonl else None
        self._tb = None
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        self._wandb = None
        if cfg.wandb:
            import wandb

            mode = wandb_mode(cfg.wandb_mode)
            self._wandb = wandb.init(project=cfg.wandb_project, name=run_name, id=self.run_id, resume="allow",
                                     dir=str(run_dir), mode=mode, config=config,
                                     settings=wandb.Settings(silent=True, console="off"))
            log.info("W&B run %s (%s mode)", self.run_id, mode)
            wandb_extras.define_metrics(self._wandb)

    def log(self, metrics: dict[str, float], step: int) -> None:
        clean = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}
        if self._jsonl:
            self._jsonl.write(json.dumps({"step": step, **clean}) + "\n")
            self._jsonl.flush()
        if self._tb:
            for k, v in clean.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb:
            self._wandb.log({**clean, wandb_extras.STEP_KEY: step}, step=step)

    def log_val_samples(self, rows: list[dict[str, Any]], step: int) -> None:
        """One validation's responses: a W&B table (they are also in val_samples.jsonl)."""
        if self._wandb and rows:
            self._wandb.log(wandb_extras.samples_table(rows, step), step=step)

    def log_images(self, images: dict[str, Path], step: int) -> None:
        """The run report's plots, logged once at the end of the run."""
        if self._wandb and images:
            self._wandb.log(wandb_extras.report_images(images, step), step=step)

    def close(self) -> None:
        if self._jsonl:
            self._jsonl.close()
        if self._tb:
            self._tb.close()
        if self._wandb:
            self._wandb.finish()
