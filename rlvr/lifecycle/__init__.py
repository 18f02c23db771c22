"""Run lifecycle: what a run starts is gone when it ends (guardian.py), and checkpoints and records survive a
kill exactly (see rlvr/pipeline/checkpoint.py and records.py)."""

from rlvr.lifecycle.guardian import close_guardian, guard_path, guard_process

__all__ = ["close_guardian", "guard_path", "guard_process"]
