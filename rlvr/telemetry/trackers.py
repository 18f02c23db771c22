"""Metric sinks: metrics.jsonl, TensorBoard and W&B (offline unless the user is logged in)."""

from __future__ import annotations

import json
import logging
import math
import os
import uuid
from pathlib import Path
from typing import Any

from rlvr.config.run import TrackersConfig
from rlvr.telemetry import wandb_extras

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
                 run_id: str | None = None, resume_step: int | None = None):
        """`resume_step`: the run resumes from its checkpoint of that step; what the killed run logged from
        that step on is replaced by what this one logs (metrics.jsonl is rewound by rlvr.pipeline.records)."""
        self.run_dir = run_dir
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self._jsonl = open(run_dir / "metrics.jsonl", "a") if cfg.jsonl else None
        self._tb = None
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: TensorBoard's readers drop the earlier events of steps >= resume_step
            self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"), purge_step=resume_step)
        self._wandb = None
        if cfg.wandb:
            self._wandb = _wandb_init(cfg, run_dir, run_name, config, self.run_id, resume_step)
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
            self._wandb.log({**clean, wandb_extras.STEP_KEY: step}, step=step, commit=True)  # now, not at the next step

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


def _wandb_init(cfg: TrackersConfig, run_dir: Path, run_name: str, config: dict[str, Any], run_id: str,
                resume_step: int | None):
    """A resumed run rewinds the W&B run to the step before its checkpoint (`resume_from`, W&B's "rewind"):
    history from `resume_step` on is replaced by what is logged next. Plain `resume` would keep the killed run's
    last step as the current one and W&B would ignore every re-run step below it (its monotonic-step rule).
    Offline, the rewind point is recorded in the run's file and applied by `wandb sync`."""
    import wandb

    mode = wandb_mode(cfg.wandb_mode)
    # A W&B service inherited from the process that started this driver (a notebook, a sweep or test runner) would
    # outlive a killed driver with its run still registered, and the resume would be refused ("run ID ... is in
    # use"). The driver starts its own service, which ends with it.
    os.environ.pop("WANDB_SERVICE", None)
    # Offline data reaches the run's .wandb file every second (W&B's default: 15 s), so a killed run loses at
    # most its last second of W&B history; metrics.jsonl holds everything.
    def common() -> dict[str, Any]:  # a fresh Settings per attempt: a failed init leaves its resume_from in it
        settings = wandb.Settings(silent=True, console="off", x_transaction_log_flush_interval=1.0)
        return dict(project=cfg.wandb_project, name=run_name, dir=str(run_dir), mode=mode, config=config,
                    settings=settings)

    if resume_step:
        try:
            run = wandb.init(resume_from=f"{run_id}?_step={resume_step - 1}", **common())
            log.info("W&B run %s rewound to step %d (%s mode)", run_id, resume_step - 1, mode)
            return run
        except Exception as err:  # a server without run rewind: say what W&B will do with the re-run steps
            log.warning("W&B cannot rewind run %s (%s): resuming it instead; W&B ignores the re-run steps from "
                        "%d up to the killed run's last logged step (metrics.jsonl and TensorBoard hold them)",
                        run_id, err, resume_step)
            wandb.teardown()  # the failed attempt may have left the run registered in this driver's service
    run = wandb.init(id=run_id, resume="allow", **common())
    log.info("W&B run %s (%s mode)", run_id, mode)
    return run
