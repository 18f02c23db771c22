"""The floors of docs/architecture.md: a package of rlvr imports only from its own floor or below, and no two
packages import each other, however indirectly. Every import counts, also those inside functions (a lazy import
is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# docs/architecture.md's table; a new package gets its floor here (and a row there) or this test fails.
FLOORS = {
    "lifecycle": 1, "data": 1, "config": 1, "algorithms": 1, "models": 1,
    "backends": 2, "runtime": 2, "judge_server": 2,
    "workers": 3,
    "envs": 4, "rollout": 4, "schedulers": 4,
    "pipeline": 5, "telemetry": 5, "report": 5,
    "cli": 6, "sim": 6,
    "start": 7, "export": 7, "eval": 7,  # rlvr/start.py, export.py, eval.py: the users' commands
}


def package_of(path: Path, root: Path) -> str:
    """rlvr/<pkg>/... -> pkg; rlvr/<module>.py -> module; rlvr/__init__.py -> ''."""
    rel = path.relative_to(root)
    return "" if rel.parts == ("__init__.py",) else rel.parts[0].removesuffix(".py")


def imported_packages(source: str, top: str = "rlvr") -> list[tuple[int, str]]:
    """(line, package) for every `import top.pkg...` / `from top.pkg... import` at any depth of the module."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + ([f"{node.module}.{a.name}" for a in node.names] if node.module == top else [])
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out += [(node.lineno, n.split(".")[1]) for n in names if n.startswith(top + ".")]
    return out


def package_edges(root: Path) -> dict[tuple[str, str], list[str]]:
    """(from package, to package) -> the places that import across, for every module under `root`."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        src = package_of(path, root)
        for line, dst in imported_packages(path.read_text()):
            if dst != src:
                edges.setdefault((src, dst), []).append(f"{path.relative_to(root.parent)}:{line}")
    return edges


def upward(edges: dict[tuple[str, str], list[str]], floors: dict[str, int]) -> list[str]:
    return [f"{src} (floor {floors[src]}) imports {dst} (floor {floors[dst]}): {', '.join(where)}"
            for (src, dst), where in sorted(edges.items()) if src and floors[dst] > floors[src]]


def cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """Every package that can reach itself, with one path back to it."""
    graph: dict[str, set[str]] = {}
    for src, dst in edges:
        graph.setdefault(src, set()).add(dst)
    found = []
    for start in sorted(graph):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    found.append(path + [start])
                    stack = []
                    break
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    return found


def test_every_package_has_a_floor():
    packages = {package_of(p, REPO / "rlvr") for p in (REPO / "rlvr").rglob("*.py")} - {""}
    assert packages - set(FLOORS) == set(), "give the new package a floor here and in docs/architecture.md"
    assert set(FLOORS) - packages == set(), "a package that is gone still has a floor"


def test_no_import_points_up_a_floor():
    assert upward(package_edges(REPO / "rlvr"), FLOORS) == []


def test_no_package_cycle():
    assert cycles(package_edges(REPO / "rlvr")) == []


def test_the_sandbox_service_stands_alone():
    """sandbox/ runs as its own service (python -m sandbox): it must not need rlvr."""
    hits = []
    for path in (REPO / "sandbox").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            hits += [f"{path.name}:{node.lineno}" for n in names if n == "rlvr" or n.startswith("rlvr.")]
    assert hits == []


def test_architecture_doc_lists_every_floor():
    doc = (REPO / "docs" / "architecture.md").read_text()
    missing = [pkg for pkg in FLOORS if f"`{pkg}/`" not in doc and f"`rlvr/{pkg}.py`" not in doc]
    assert missing == []


# ---------------------------------------------------------------------------- the checker catches what it should


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "rlvr"
    for pkg in ("data", "workers", "pipeline"):
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text("")
    return root


def test_an_upward_import_inside_a_function_is_caught(tree: Path):
    (tree / "data" / "types.py").write_text("def f():\n    from rlvr.workers.rewards import base\n")
    found = upward(package_edges(tree), {"data": 1, "workers": 3, "pipeline": 5})
    assert len(found) == 1 and "data (floor 1) imports workers (floor 3)" in found[0] and "types.py:2" in found[0]


def test_a_cycle_on_one_floor_is_caught(tree: Path):
    (tree / "workers" / "a.py").write_text("import rlvr.pipeline.b\n")
    (tree / "pipeline" / "b.py").write_text("from rlvr import data\nfrom rlvr.workers import a\n")
    (tree / "data" / "c.py").write_text("x = 1\n")
    assert cycles(package_edges(tree)) == [["pipeline", "workers", "pipeline"], ["workers", "pipeline", "workers"]]


def test_downward_imports_pass(tree: Path):
    (tree / "pipeline" / "b.py").write_text("from rlvr.workers.a import x\nfrom rlvr.data import types\n")
    edges = package_edges(tree)
    assert set(edges) == {("pipeline", "workers"), ("pipeline", "data")}
    assert upward(edges, {"data": 1, "workers": 3, "pipeline": 5}) == [] and cycles(edges) == []
