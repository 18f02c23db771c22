"""`python -m rlvr.lifecycle OWNER_PID COMMAND_FD`: the guardian process (started by rlvr.lifecycle.guardian)."""

import sys

from rlvr.lifecycle.guardian import serve

sys.exit(serve(int(sys.argv[1]), int(sys.argv[2])))
