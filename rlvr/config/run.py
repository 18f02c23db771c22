"""The `run`, `trackers` and `faults` sections: how a run is named, saved, resumed, logged and kept alive."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.base import Strict


class RunConfig(Strict):
    name: str | None = None  # defaults to the config file's stem; the run directory is <output_dir>/<name>-<time>
    output_dir: str = "runs"
    seed: int = 42
    max_steps: int = Field(20, ge=1)
    eval_every: int = Field(5, ge=0)  # 0: no validation; otherwise at step 0, every k steps and at the end
    save_every: int = Field(0, ge=0)  # 0: no checkpoints
    keep_checkpoints: int = Field(2, ge=1)
    # last: the optimizer state (2/3 of a full checkpoint with Adam) stays only in the newest checkpoint, the one
    # `resume: latest` continues from; older ones keep their weights (export, eval) but cannot be resumed from
    keep_optimizer: Literal["all", "last"] = "all"
    resume: str | None = None  # "latest" or a checkpoint directory
    progress_bar: bool = True


class TrackersConfig(Strict):
    jsonl: bool = True
    tensorboard: bool = True
    wandb: bool = True
    wandb_project: str = "rlvr"
    # auto: online when the user is logged in to W&B (API key present), offline otherwise.
    wandb_mode: Literal["auto", "offline", "online"] = "auto"


class FaultsConfig(Strict):
    """Worker faults (docs/faults.md): an actor_infer, reward or scheduler actor that dies is restarted by Ray and
    its in-flight requests are sent again; the judge and sandbox servers are restarted by whoever started them;
    every wait of the driver has a deadline. What happened is counted under `faults/...`."""

    max_restarts: int = Field(3, ge=0)  # per actor_infer, reward and scheduler actor, and per server; 0: a death stops
    wait_timeout_s: float = Field(3600.0, gt=0)  # the longest single wait of the driver (one phase of a step)
    # A restarted worker must serve again within this; requests that were in flight on it are sent again until
    # then (past it they fail, counted).
    restart_timeout_s: float = Field(900.0, gt=0)
    poll_s: float = Field(1.0, gt=0)  # while it waits, the driver checks its workers and servers this often

    @property
    def resend_patience_s(self) -> float:
        """How long a call to a dead worker waits for its restart before it fails: none without restarts."""
        return self.restart_timeout_s if self.max_restarts else 0.0
