"""`python -m rlvr.judge_server --model <hf dir> [--port 0]`: see server.py."""

import sys

from rlvr.judge_server.server import main

if __name__ == "__main__":
    sys.exit(main())
