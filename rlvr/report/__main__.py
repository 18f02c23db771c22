"""`python -m rlvr.report RUN_DIR [RUN_B ...] [--out DIR]`: summary table on the console, plots and index.html."""

from __future__ import annotations

import argparse
import sys

from rlvr.report import RunDirError, build_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlvr.report", description=__doc__)
    parser.add_argument("runs", nargs="+", help="run directories (runs/<name>-<time>); several overlay their curves")
    parser.add_argument("--out", default=None, help="output directory (default: RUN_DIR/report, or "
                        "RUN_A/report/vs-<RUN_B> for a comparison)")
    args = parser.parse_args(argv)
    try:
        report = build_report(args.runs, args.out)
    except RunDirError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(report.text)
    print(f"report: {report.index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
