"""`python -m rlvr.export RUN [--step N|latest] --out DIR`: a run's checkpoint as a Hugging Face model directory
(the CLI is rlvr/cli/export.py)."""

from __future__ import annotations

import sys

from rlvr.cli.export import main

if __name__ == "__main__":
    sys.exit(main())
