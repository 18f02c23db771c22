"""The end of a run from the CLI: the report written, its plots sent to W&B, its summary for the console."""

from __future__ import annotations

import logging

from rlvr.report import build_report

log = logging.getLogger(__name__)


def finish_run(pipeline) -> str:
    """Returns what the console shows. A failure to write the report is logged (with its traceback) and
    said, never turned into a failed run: the training itself finished."""
    try:
        report = build_report(pipeline.run_dir)
    except Exception:
        log.exception("the run finished but its report could not be written")
        return f"report: failed (see above); retry with: python -m rlvr.report {pipeline.run_dir}"
    pipeline.trackers.log_images(report.images, pipeline.step)
    return f"{report.text}\nreport: {report.index}"
