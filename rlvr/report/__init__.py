"""A run's report: a summary table for the console and `<run>/report/` (PNG plots and index.html).

    python -m rlvr.report RUN_DIR            # the run's report (also for a run that crashed)
    python -m rlvr.report RUN_A RUN_B        # both runs' curves overlaid, in RUN_A/report/vs-<RUN_B name>/
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlvr.report.run_data import RunData, RunDirError, load_run
from rlvr.report.summary import Summary, format_text, summarize


@dataclass
class Report:
    out_dir: Path
    index: Path
    images: dict[str, Path]
    summaries: list[Summary]

    @property
    def text(self) -> str:
        return "\n\n".join(format_text(s) for s in self.summaries)


def build_report(run_dirs: list[str | Path] | str | Path, out_dir: str | Path | None = None) -> Report:
    """Reads the run(s), writes the plots and index.html; the first run's report/ (or vs-<other>/ inside it for a
    comparison) unless `out_dir` is given."""
    from rlvr.report.html_page import write_index
    from rlvr.report.plots import write_plots

    paths = [run_dirs] if isinstance(run_dirs, (str, Path)) else list(run_dirs)
    runs = [load_run(p) for p in paths]
    if out_dir is None:
        out_dir = runs[0].path / "report"
        if len(runs) > 1:
            out_dir = out_dir / ("vs-" + "-".join(r.name for r in runs[1:]))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summaries = [summarize(r) for r in runs]
    images = write_plots(runs, out_dir)
    index = write_index(runs, summaries, images, out_dir)
    return Report(out_dir, index, images, summaries)


__all__ = ["Report", "RunData", "RunDirError", "build_report", "load_run"]
