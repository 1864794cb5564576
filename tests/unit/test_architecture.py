"""The import graph: no module cycle, the product never imports the lab, every package has a rule.

The checker reads every module's imports with ``ast``, where they are: at module level,
inside functions and under ``if TYPE_CHECKING:`` all count, because each one is a
dependency someone has to untangle. An edge goes to the most specific module that
exists: ``from flinkai.x import y`` reaches ``flinkai.x.y`` when ``y`` is a submodule
and ``flinkai/x/__init__.py`` when ``y`` is a name there. Relative imports resolve the
same way. A module's import of a package it lives in does not count (Python runs that
``__init__`` before the module anyway). See docs/architecture.md.
"""

from __future__ import annotations

import ast
import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCT = REPO / "flinkai"
LAB = REPO / "benchmarks" / "flinkai_bench"
#: The trees whose modules must not form a cycle: (folder, its import name).
TREES = {"flinkai": PRODUCT, "flinkai_bench": LAB}

#: The top of the product: commands, the demo, the test harness, the UDFs Flink loads.
TOP = frozenset({"cli", "demo", "testing", "udfs"})

#: unit -> the only flinkai units it may import (the leaves of the graph).
ONLY: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "paths": frozenset({"errors"}),
    "sharing": frozenset(),
    "metrics": frozenset(),
    "gpu_metrics": frozenset(),
    "local": frozenset(),
    "security": frozenset({"errors"}),
    "config": frozenset({"errors", "paths"}),
    "datasets": frozenset({"errors", "paths"}),
    "staging": frozenset({"errors"}),
}
#: unit -> flinkai units it must never import (imports only go down the list in the docs).
NEVER: dict[str, frozenset[str]] = {
    "models": frozenset({"backends", "functions", "runtime", "operators", *TOP}),
    "backends": frozenset({"functions", "runtime", "operators", "kafka", "serve", *TOP}),
    "functions": frozenset({"models", "runtime", "operators", "kafka", *TOP}),
    "drift": frozenset({"backends", "functions", "runtime", "operators", "kafka", *TOP}),
    "state": frozenset({"backends", "functions", "runtime", "operators", *TOP}),
    "rag": frozenset({"backends", "functions", "runtime", "operators", *TOP}),
    "agents": frozenset({"backends", "models", "runtime", "operators", *TOP}),
    "anomaly": frozenset({"backends", "models", "runtime", "operators", "kafka", *TOP}),
    # the LLM runtime reads its own export folder; models/llm_export.py writes it
    "llm": frozenset({"models", "backends", "functions", "runtime", "operators", *TOP}),
    "plan": frozenset({"backends", "functions", "runtime", "operators", "kafka", *TOP}),
    # the trainer reads a serving export and builds adapters; the operator drives it
    "finetune": frozenset({"backends", "functions", "runtime", "operators", "kafka", *TOP}),
    "kafka": frozenset({"models", "backends", "functions", "runtime", "operators", *TOP}),
    "serve": frozenset({"backends", "functions", "runtime", "operators", *TOP}),
    "runtime": frozenset({"operators", *TOP}),
    "operators": TOP,
    "testing": frozenset({"cli", "demo", "udfs"}),
    "demo": frozenset({"cli", "testing", "udfs"}),
    "cli": frozenset({"testing", "udfs"}),
    # Flink loads the UDFs by module name; test_nothing_imports_the_udf_modules is the other half
    "udfs": frozenset({"cli", "demo", "testing"}),
}
#: unit -> third-party modules it must never import, not even lazily (its hot path).
FORBIDDEN_THIRD_PARTY: dict[str, frozenset[str]] = {
    "llm": frozenset({"torch", "transformers", "sentence_transformers", "gguf", "accelerate"}),
}


@dataclass(frozen=True)
class Module:
    """One ``.py`` file of a tree.

    Attributes:
        name: Its dotted import name; a package's ``__init__.py`` is the package's name.
        path: The file.
        is_package: Whether the file is an ``__init__.py``.
    """

    name: str
    path: Path
    is_package: bool


def modules(root: Path, prefix: str) -> dict[str, Module]:
    """Every module under ``root``, by dotted name (``root`` itself imports as ``prefix``)."""
    found: dict[str, Module] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join([prefix, *(parts[:-1] if is_package else parts)])
        found[name] = Module(name, path, is_package)
    return found


@functools.cache
def imported_names(module: Module) -> tuple[tuple[str, int], ...]:
    """The imports of ``module`` (see :func:`_imports`), read once per test session."""
    return tuple(_imports(module))


def _imports(module: Module) -> Iterator[tuple[str, int]]:
    """(absolute dotted name, line) of each import; ``from m import y`` yields ``m.y``.

    ``ast.walk`` visits function bodies and ``if TYPE_CHECKING:`` blocks too.
    Relative imports come out absolute; one that climbs above the tree is left out.
    """
    for node in ast.walk(ast.parse(module.path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.name.split(".")
                # a module's own package is level 1; an __init__ is its own package
                keep = len(base) - node.level + (1 if module.is_package else 0)
                if keep < 1:
                    continue
                source = ".".join([*base[:keep], *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            # y is a submodule (m.y) or a name in m; _target tells which
            yield from ((f"{source}.{alias.name}", node.lineno) for alias in node.names)


def _target(name: str, known: dict[str, Module]) -> str | None:
    """The most specific module of ``known`` that ``name`` is or lies in."""
    while name not in known and "." in name:
        name = name.rpartition(".")[0]
    return name if name in known else None


def module_graph(root: Path, prefix: str) -> dict[str, dict[str, int]]:
    """module -> {module of the same tree it imports: the line of the first such import}."""
    known = modules(root, prefix)
    graph: dict[str, dict[str, int]] = {}
    for module in known.values():
        deps = graph.setdefault(module.name, {})
        for name, line in imported_names(module):
            target = _target(name, known)
            # an import of a package the module lives in (or of itself) is no edge
            if target is None or target == module.name or module.name.startswith(target + "."):
                continue
            deps.setdefault(target, line)
    return graph


def tangles(graph: dict[str, dict[str, int]]) -> list[set[str]]:
    """The strongly connected components of two or more modules (each holds a cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan; the module graph is shallow enough to recurse
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle per tangle, each as ``[a, b, ..., a]``."""
    return [_cycle_in(component, graph) for component in tangles(graph)]


def _cycle_in(component: set[str], graph: dict[str, dict[str, int]]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first)."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node]):
                if nxt == start:
                    return [*paths[node], start]
                if nxt in component and nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    """``a (line 3) -> b (line 9) -> a``: where each hop's import is."""
    hops = [f"{a} (line {graph[a][b]})" for a, b in itertools.pairwise(cycle)]
    return " -> ".join([*hops, cycle[-1]])


def units(root: Path) -> set[str]:
    """The top-level packages and modules of a tree (folders without Python are data)."""
    found = {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    found |= {p.name for p in root.iterdir() if p.is_dir() and any(p.rglob("*.py"))}
    return found


def unit_graph(root: Path, prefix: str) -> dict[str, set[str]]:
    """unit -> the other units of the tree its modules import."""
    graph: dict[str, set[str]] = {}
    for src, deps in module_graph(root, prefix).items():
        if src == prefix:
            continue
        unit = src.split(".")[1]
        graph.setdefault(unit, set()).update(
            d.split(".")[1] for d in deps if d != prefix and d.split(".")[1] != unit
        )
    return graph


def foreign_imports(root: Path, prefix: str) -> dict[str, set[str]]:
    """unit -> top-level names it imports from outside the tree (lazy ones too)."""
    found: dict[str, set[str]] = {}
    for module in modules(root, prefix).values():
        if module.name == prefix:
            continue
        tops = found.setdefault(module.name.split(".")[1], set())
        tops.update(n.split(".")[0] for n, _ in imported_names(module) if n.split(".")[0])
        tops.discard(prefix)
    return found


def lab_imports(root: Path, prefix: str) -> list[str]:
    """``module:line imports name`` for every import of ``flinkai_bench`` under ``root``."""
    return [
        f"{m.name}:{line} imports {name}"
        for m in modules(root, prefix).values()
        for name, line in imported_names(m)
        if name.split(".")[0] == "flinkai_bench"
    ]


def rule_violations(graph: dict[str, set[str]]) -> list[str]:
    """Each unit's imports that its rule forbids, and each unit without a rule."""
    bad = []
    for unit, deps in sorted(graph.items()):
        if unit in ONLY:
            wrong = deps - ONLY[unit]
        elif unit in NEVER:
            wrong = deps & NEVER[unit]
        else:
            bad.append(f"flinkai.{unit} has no rule: add it to ONLY or NEVER")
            continue
        bad += [f"flinkai.{unit} imports flinkai.{d}" for d in sorted(wrong)]
    return bad


# -- the product and the lab ---------------------------------------------------------


@pytest.mark.parametrize("prefix", sorted(TREES))
def test_no_cycle_between_modules(prefix: str) -> None:
    graph = module_graph(TREES[prefix], prefix)
    found = []
    for component in tangles(graph):
        found.append(describe(_cycle_in(component, graph), graph))
        if len(component) > 2:
            found.append(f"  (the tangle: {', '.join(sorted(component))})")
    assert not found, "module cycles:\n" + "\n".join(found)


def test_the_product_never_imports_the_lab() -> None:
    found = lab_imports(PRODUCT, "flinkai")
    assert not found, "\n".join(found)


def test_every_unit_has_exactly_one_rule() -> None:
    present = units(PRODUCT)
    both = set(ONLY) & set(NEVER)
    assert not both, f"{sorted(both)} have two rules"
    assert not present - set(ONLY) - set(NEVER), (
        f"no rule: {sorted(present - set(ONLY) - set(NEVER))}"
    )
    stale = (set(ONLY) | set(NEVER)) - present
    assert not stale, f"rules for units that are gone: {sorted(stale)}"


def test_every_unit_keeps_its_rule() -> None:
    graph = {unit: set() for unit in units(PRODUCT)} | unit_graph(PRODUCT, "flinkai")
    assert not rule_violations(graph), "\n".join(rule_violations(graph))


@pytest.mark.parametrize("unit", sorted(FORBIDDEN_THIRD_PARTY))
def test_runtime_packages_do_not_import_torch(unit: str) -> None:
    bad = foreign_imports(PRODUCT, "flinkai").get(unit, set()) & FORBIDDEN_THIRD_PARTY[unit]
    assert not bad, f"flinkai.{unit} imports {sorted(bad)}"


def test_nothing_imports_the_udf_modules() -> None:
    # flinkai/udfs is the top: Flink loads it by module name, no flinkai code imports it
    importers = sorted(u for u, deps in unit_graph(PRODUCT, "flinkai").items() if "udfs" in deps)
    assert not importers, f"{importers} import flinkai.udfs"


# -- the checker, on a tree made for it ------------------------------------------------

#: A product tree with one cycle of each kind, and an import of the lab.
BAD_TREE = {
    "__init__.py": "",
    # a cycle closed by an import inside a function
    "alpha.py": "def f():\n    from flinkai.beta import x\n",
    "beta.py": "from flinkai import alpha\n",
    # a cycle closed by an import only the type checker sees
    "gamma.py": (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from flinkai.delta import D\n"
    ),
    "delta.py": "import flinkai.gamma\n",
    # a cycle through a package's __init__: epsilon -> pkg -> pkg.impl -> epsilon
    "epsilon.py": "from flinkai.pkg import Thing\n",
    "pkg/__init__.py": "from .impl import Thing\n",
    # importing its own package is no edge: pkg.impl -> pkg would be a cycle otherwise
    "pkg/impl.py": "from flinkai import pkg\nfrom flinkai.pkg import T\nfrom ..epsilon import E\n",
    "pkg/other.py": "from . import impl\n",
    # the product reaching into the lab, lazily
    "zeta.py": "def run():\n    import flinkai_bench.suite\n",
    # a new package with no rule
    "newcomer/__init__.py": "from flinkai.errors import E\n",
    "errors.py": "",
}


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(body, encoding="utf-8")
    return root


def test_the_checker_finds_every_kind_of_cycle(tmp_path: Path) -> None:
    root = _write(tmp_path / "flinkai", BAD_TREE)
    graph = module_graph(root, "flinkai")
    assert sorted(import_cycles(graph)) == [
        ["flinkai.alpha", "flinkai.beta", "flinkai.alpha"],
        ["flinkai.delta", "flinkai.gamma", "flinkai.delta"],
        ["flinkai.epsilon", "flinkai.pkg", "flinkai.pkg.impl", "flinkai.epsilon"],
    ]
    # the edges behind them, with the lines the messages name
    assert graph["flinkai.alpha"] == {"flinkai.beta": 2}
    assert graph["flinkai.gamma"] == {"flinkai.delta": 3}
    assert graph["flinkai.epsilon"] == {"flinkai.pkg": 1}
    assert graph["flinkai.pkg"] == {"flinkai.pkg.impl": 1}
    assert graph["flinkai.pkg.impl"] == {"flinkai.epsilon": 3}  # not its own package
    assert graph["flinkai.pkg.other"] == {"flinkai.pkg.impl": 1}  # `from . import impl`
    assert describe(["flinkai.alpha", "flinkai.beta", "flinkai.alpha"], graph) == (
        "flinkai.alpha (line 2) -> flinkai.beta (line 1) -> flinkai.alpha"
    )


def test_the_checker_finds_a_lab_import_and_a_unit_without_a_rule(tmp_path: Path) -> None:
    root = _write(tmp_path / "flinkai", BAD_TREE)
    assert lab_imports(root, "flinkai") == ["flinkai.zeta:2 imports flinkai_bench.suite"]
    graph = unit_graph(root, "flinkai")
    assert graph["newcomer"] == {"errors"}
    assert "flinkai.newcomer has no rule: add it to ONLY or NEVER" in rule_violations(graph)


def test_the_checker_finds_an_upward_import_and_torch(tmp_path: Path) -> None:
    root = _write(
        tmp_path / "flinkai",
        {
            "config/__init__.py": "from flinkai.backends import z\n",
            "backends/__init__.py": "",
            "llm/decode.py": "def g():\n    import torch.nn\n",
        },
    )
    graph = unit_graph(root, "flinkai")
    assert rule_violations(graph) == ["flinkai.config imports flinkai.backends"]
    assert "torch" in foreign_imports(root, "flinkai")["llm"]
