"""The run's summary in numbers: per-domain val_correct (first -> last, best), training reward, response length,
reward statuses, time per phase and throughput. Pure functions of a RunData; the console and index.html print the
same table."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rlvr.report.run_data import RunData

STATUSES = ("ok", "error", "timeout", "invalid")


@dataclass
class DomainRow:
    domain: str  # "all" for the all-domain val_correct
    val: list[tuple[int, float]] = field(default_factory=list)
    reward: list[tuple[int, float]] = field(default_factory=list)
    length_mean: float | None = None
    statuses: dict[str, int] = field(default_factory=dict)

    @property
    def best(self) -> tuple[int, float] | None:
        """The highest val_correct and the first step that reached it."""
        if not self.val:
            return None
        top = max(v for _, v in self.val)
        return next((s, v) for s, v in self.val if v == top)


@dataclass
class Summary:
    run: str
    progress: str  # "2/2 steps" or "stopped after step 1 of 4"
    finished: bool
    rows: list[DomainRow]
    phases: dict[str, float]  # mean seconds per step of each phase (val: per validation)
    tokens_per_s: dict[str, float]  # generation, training
    problems: list[str]
    checkpoints: list[tuple[str, int]] = field(default_factory=list)  # (directory name, bytes) of each kept one


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(run: RunData) -> Summary:
    rows = []
    for d in run.domains:
        lengths = [v for _, v in run.series(f"{d}/response_length/mean")]
        statuses = {s: int(sum(v for _, v in run.series(f"{d}/reward/status/{s}"))) for s in STATUSES}
        rows.append(DomainRow(d, run.series(f"val_correct/{d}/mean"), run.series(f"{d}/reward/mean"),
                              _mean(lengths), statuses))
    rows.append(DomainRow("all", run.series("val_correct/all/mean")))
    phases = {}
    for key in run.keys(r"time/[\w\-]+"):
        if key != "time/step":
            values = [v for _, v in run.series(key)]
            phases[key.split("/", 1)[1]] = _mean(values)
    step_times = [v for _, v in run.series("time/step")]
    if step_times:
        phases["step (total)"] = _mean(step_times)
    tokens = {}
    for label, key in (("generation", "system/response_tokens_per_s"), ("training", "system/train_tokens_per_s")):
        value = _mean([v for _, v in run.series(key)])
        if value is not None:
            tokens[label] = value
    last, total = run.last_step, run.max_steps
    if run.evaluated is not None:
        progress = f"validation only, of {run.evaluated.get('model')}"
    elif last is None:
        progress = f"no training step logged (of {total})" if total else "no training step logged"
    elif run.finished:
        progress = f"{last + 1}/{total} steps"
    else:
        progress = f"stopped after step {last + 1} of {total or '?'} (crashed or interrupted)"
    return Summary(run.name, progress, run.finished, rows, phases, tokens, list(run.problems),
                   checkpoint_sizes(run.path))


def size_bytes(path: Path) -> int:
    """What a directory takes on disk (its files' sizes)."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def checkpoint_sizes(run_dir: Path) -> list[tuple[str, int]]:
    """(name, bytes on disk) of each checkpoint the run kept, oldest first."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    found = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_"))
    return [(p.name, size_bytes(p)) for p in found]


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB") else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def checkpoints_line(summary: Summary) -> str | None:
    if not summary.checkpoints:
        return None
    return "checkpoints: " + " | ".join(f"{name} {human_bytes(size)}" for name, size in summary.checkpoints)


def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def table_rows(summary: Summary) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the per-domain table (text and HTML render the same cells)."""
    header = ["domain", "val_correct first -> last", "best (step)", "train reward first -> last",
              "response length", "reward statuses ok/error/timeout/invalid"]
    cells = []
    for r in summary.rows:
        val = f"{_fmt(r.val[0][1])} -> {_fmt(r.val[-1][1])}" if r.val else "-"
        best = f"{r.best[1]:.3f} ({r.best[0]})" if r.best else "-"
        reward = f"{_fmt(r.reward[0][1])} -> {_fmt(r.reward[-1][1])}" if r.reward else "-"
        statuses = "/".join(str(r.statuses.get(s, 0)) for s in STATUSES) if r.statuses else "-"
        cells.append([r.domain, val, best, reward, _fmt(r.length_mean, 1), statuses])
    return header, cells


def format_text(summary: Summary) -> str:
    header, cells = table_rows(summary)
    widths = [max(len(row[i]) for row in [header, *cells]) for i in range(len(header))]
    line = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731
    out = [f"run {summary.run}: {summary.progress}", line(header), line(["-" * w for w in widths])]
    out += [line(row) for row in cells]
    if summary.phases:
        out.append("time per step, mean s: " + " | ".join(f"{k} {v:.1f}" for k, v in summary.phases.items()))
    if summary.tokens_per_s:
        out.append("tokens/s: " + " | ".join(f"{k} {v:.1f}" for k, v in summary.tokens_per_s.items()))
    if line_ := checkpoints_line(summary):
        out.append(line_)
    out += [f"note: {p}" for p in summary.problems]
    return "\n".join(out)
