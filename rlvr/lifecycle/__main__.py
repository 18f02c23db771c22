"""`python -m rlvr.lifecycle OWNER_PID OWNER_START_TIME COMMAND_FD`: starts the guardian process (see
rlvr.lifecycle.guardian) as a child of its own that outlives it, prints that child's pid and exits: the guardian
is then no direct child of its owner, which Ray would SIGKILL with the owner."""

import os
import sys

from rlvr.lifecycle.guardian import serve

owner, owner_started, commands = (int(a) for a in sys.argv[1:4])
child = os.fork()  # a fresh interpreter with no threads yet: forking is safe here
if child:
    print(child, flush=True)
    os._exit(0)
sys.stdout = open(os.devnull, "w")
os.dup2(sys.stdout.fileno(), 1)  # the owner reads the pid until end of file: let go of the pipe
sys.exit(serve(owner, commands, owner_started))
