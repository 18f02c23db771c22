"""Load a bench script (bench/ is scripts, not a package) as a module, so tests can check its pure parts."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def load_bench(name: str) -> ModuleType:
    """bench/<name>.py as a module named `name` (its `if __name__ == "__main__"` part does not run)."""
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
