"""The package graph: imports go one way, so new model kinds copy a shape without cycles."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "flinkai"

#: package -> the only flinkai packages it may import (the leaves of the graph).
ONLY: dict[str, set[str]] = {"config": {"errors", "paths"}, "local": set()}
#: package -> flinkai packages it must never import (see docs/architecture.md).
FORBIDDEN: dict[str, set[str]] = {
    "models": {"backends", "functions", "runtime", "operators", "bench", "cli"},
    "backends": {"functions", "runtime", "operators", "bench", "cli"},
    "functions": {"models", "runtime", "operators", "bench", "cli"},
    "drift": {"backends", "functions", "runtime", "operators", "bench", "cli"},
    "state": {"backends", "functions", "runtime", "operators", "bench", "cli"},
    "rag": {"backends", "functions", "runtime", "operators", "bench", "cli"},
    "agents": {"backends", "models", "runtime", "operators", "bench", "cli"},
    # the LLM runtime reads its own export folder; models/llm_export.py writes it
    "llm": {"models", "backends", "functions", "runtime", "operators", "bench", "cli"},
}
#: package -> third-party modules it must never import, not even lazily (its hot path).
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "llm": {"torch", "transformers", "sentence_transformers", "gguf", "accelerate"},
}


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def _package_of(path: Path, root: Path) -> str:
    return path.relative_to(root).with_suffix("").parts[0]


def package_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """flinkai package -> the flinkai packages its modules import (lazy imports included)."""
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        src = _package_of(path, root)
        deps = graph.setdefault(src, set())
        for module in _imports(path):
            parts = module.split(".")
            if parts[0] == "flinkai" and len(parts) > 1 and parts[1] != src:
                deps.add(parts[1])
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, as a path that starts and ends at the same node, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_cycle_between_packages() -> None:
    assert find_cycle(package_graph()) is None


@pytest.mark.parametrize("package", sorted(ONLY))
def test_leaves_import_only_their_leaves(package: str) -> None:
    bad = package_graph().get(package, set()) - ONLY[package]
    assert not bad, f"flinkai.{package} imports {sorted(bad)}"


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_only_downwards(package: str) -> None:
    bad = package_graph().get(package, set()) & FORBIDDEN[package]
    assert not bad, f"flinkai.{package} imports {sorted(bad)}"


def third_party_imports(root: Path = PACKAGE) -> dict[str, set[str]]:
    """flinkai package -> top-level non-flinkai modules its modules import (lazy ones too)."""
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        mods = found.setdefault(_package_of(path, root), set())
        mods.update(m.split(".")[0] for m in _imports(path) if m.split(".")[0] != "flinkai")
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN_THIRD_PARTY))
def test_runtime_packages_do_not_import_torch(package: str) -> None:
    bad = third_party_imports().get(package, set()) & FORBIDDEN_THIRD_PARTY[package]
    assert not bad, f"flinkai.{package} imports {sorted(bad)}"


def test_nothing_imports_the_udf_modules() -> None:
    # flinkai/udfs is the top: Flink loads it by module name, no flinkai code imports it
    importers = sorted(p for p, deps in package_graph().items() if "udfs" in deps)
    assert not importers, f"{importers} import flinkai.udfs"


def test_the_checks_catch_a_cycle_and_an_upward_import(tmp_path: Path) -> None:
    # the checker itself: a two-package cycle and a config that imports upward
    for name, body in {
        "a/__init__.py": "from flinkai.b import x\n",
        "b/__init__.py": "def f():\n    from flinkai.a import y\n",
        "config/__init__.py": "from flinkai.backends import z\n",
        "llm/decode.py": "def g():\n    import torch.nn\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    graph = package_graph(tmp_path)
    assert find_cycle(graph) in (["a", "b", "a"], ["b", "a", "b"])
    assert graph["config"] == {"backends"}
    assert "torch" in third_party_imports(tmp_path)["llm"]
