"""The command line: `python -m rlvr.start` (start), `--dry-run` (dry_run), the run header (describe)."""
