"""`python -m rlvr.start --config configs/math.yaml [key=value ...]`: the command users type; the CLI itself is
rlvr/cli/start.py."""

from __future__ import annotations

import sys

from rlvr.cli.start import main

if __name__ == "__main__":
    sys.exit(main())
