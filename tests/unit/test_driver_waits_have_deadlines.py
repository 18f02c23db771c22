"""Issue 11's rule "never a hang: every wait in the driver has a deadline", checked on the source: in the driver's
modules a bare `ray.get` / `ray.wait` (no `timeout=`) may only read refs already known to be ready. Every other
wait goes through `Waiter` (rlvr/runtime/waiter.py). The merge of the critic branch once put bare `ray.get`s
back into `Cluster.collective`, the forward passes and the checkpoint save: training and saving had no deadline."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DRIVER_MODULES = sorted((ROOT / "rlvr/pipeline").glob("*.py")) + [ROOT / "rlvr/workers/cluster.py"]

# (module, function): why its bare wait cannot block
READY_ONLY = {
    ("rollout.py", "stream"): "reads the ref `waiter.first` returned finished",
    ("faults.py", "_check_worker"): "reads a ping `ray.wait(timeout=0)` found finished",
    ("faults.py", "_check_push"): "reads a weight push `ray.wait(timeout=0)` found finished",
    ("system_metrics.py", "sample"): "reads the probes `ray.wait(timeout=...)` returned ready",
}


def bare_waits(path: Path) -> list[tuple[str, int]]:
    """(enclosing function, line) of each ray.get / ray.wait call without a timeout keyword."""
    found = []
    for func in ast.walk(ast.parse(path.read_text())):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "ray"
                    and node.func.attr in ("get", "wait") and not any(k.arg == "timeout" for k in node.keywords)):
                found.append((func.name, node.lineno))
    return found


def test_every_driver_wait_has_a_deadline():
    offending = [f"{path.name}:{line} in {name}()" for path in DRIVER_MODULES for name, line in bare_waits(path)
                 if (path.name, name) not in READY_ONLY]
    assert not offending, f"bare ray.get/ray.wait in the driver (use the Waiter): {offending}"


def test_the_check_sees_a_bare_wait(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import ray\n\ndef f(refs):\n    return ray.get(refs)\n\n"
                      "def g(refs):\n    return ray.get(refs, timeout=5)\n")
    assert bare_waits(module) == [("f", 4)]
