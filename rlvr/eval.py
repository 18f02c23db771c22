"""`python -m rlvr.eval --config C --model M [--model M2 ...]`: validation only, of any model or checkpoint, side
by side (the CLI is rlvr/cli/evaluate.py)."""

from __future__ import annotations

import sys

from rlvr.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
