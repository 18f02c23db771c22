"""What W&B users expect beyond scalars: panels grouped by section against the global step (val_correct/<domain>
summarised by its best value), one table of validation responses per validation, the report's plots at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

STEP_KEY = "global_step"
SAMPLE_COLUMNS = ("step", "domain", "question", "response", "ground_truth", "reward", "correct", "status")


def define_metrics(run) -> None:
    """Every metric is plotted against the global step (also after a resume, whose W&B step counter restarts
    from what it logged); val_correct keeps its best value in the run summary besides the last."""
    run.define_metric(STEP_KEY, hidden=True)
    run.define_metric("*", step_metric=STEP_KEY)
    run.define_metric("val_correct/*", step_metric=STEP_KEY, summary="max,last")


def samples_table(rows: list[dict[str, Any]], step: int) -> dict[str, Any]:
    import wandb

    data = []
    for r in rows:
        values = {**r, "step": step, "question": r.get("question") or r.get("prompt")}  # older rows: the uid only
        data.append([_cell(values.get(c)) for c in SAMPLE_COLUMNS])
    return {"val/samples": wandb.Table(columns=list(SAMPLE_COLUMNS), data=data), STEP_KEY: step}


def _cell(value: Any) -> Any:
    return value if value is None or isinstance(value, (bool, int, float)) else str(value)


def report_images(images: dict[str, Path], step: int) -> dict[str, Any]:
    import wandb

    return {**{f"report/{name}": wandb.Image(str(path), caption=name) for name, path in images.items()},
            STEP_KEY: step}
