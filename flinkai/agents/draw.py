"""The decision graph as a picture, from LangGraph's own structure (``get_graph()``).

LangGraph's PNG renderers need either a web service (Mermaid) or Graphviz; this draws
the same nodes and edges with matplotlib instead. Nodes are placed in layers by
their longest distance from ``__start__`` (the graph is acyclic); conditional edges
are dashed and labelled with the router function that chooses them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flinkai.agents.errors import AgentsError

__all__ = ["GraphShape", "draw_png", "graph_shape", "layers"]


@dataclass(frozen=True)
class GraphShape:
    """Nodes and edges of a compiled graph, as plain data.

    Attributes:
        nodes: Node ids, in LangGraph's order.
        edges: ``(source, target, conditional, label)``; ``label`` names the router
            of a conditional edge (empty for plain edges).
    """

    nodes: tuple[str, ...]
    edges: tuple[tuple[str, str, bool, str], ...]


def graph_shape(compiled: Any) -> GraphShape:
    """Read a compiled LangGraph graph's nodes and edges (``get_graph()``)."""
    drawable = compiled.get_graph()
    routers: dict[tuple[str, str], str] = {}
    for source, branches in compiled.builder.branches.items():
        for name, spec in branches.items():
            for target in (spec.ends or {}).values():
                routers[(source, target)] = name
    edges = tuple(
        (e.source, e.target, bool(e.conditional),
         routers.get((e.source, e.target), "") if e.conditional else "")
        for e in drawable.edges
    )  # fmt: skip
    return GraphShape(tuple(drawable.nodes), edges)


def layers(shape: GraphShape) -> dict[str, int]:
    """Each node's longest distance from the nodes without incoming edges.

    Raises:
        AgentsError: The graph has a cycle.
    """
    incoming: dict[str, list[str]] = {n: [] for n in shape.nodes}
    for source, target, _, _ in shape.edges:
        incoming[target].append(source)
    depth: dict[str, int] = {}
    visiting: set[str] = set()

    def visit(node: str) -> int:
        if node in depth:
            return depth[node]
        if node in visiting:
            raise AgentsError(f"the graph has a cycle through {node!r}: cannot layer it")
        visiting.add(node)
        depth[node] = max((visit(s) + 1 for s in incoming[node]), default=0)
        visiting.discard(node)
        return depth[node]

    for node in shape.nodes:
        visit(node)
    return depth


def _positions(shape: GraphShape, depth: Mapping[str, int]) -> dict[str, tuple[float, float]]:
    by_layer: dict[int, list[str]] = {}
    for node in shape.nodes:
        by_layer.setdefault(depth[node], []).append(node)
    pos = {}
    for layer, names in by_layer.items():
        for i, name in enumerate(names):
            pos[name] = (i - (len(names) - 1) / 2, -float(layer))
    return pos


def draw_png(shape: GraphShape, out: Path, title: str = "") -> Path:
    """Draw ``shape`` top to bottom into a PNG at ``out``; returns ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    depth = layers(shape)
    pos = _positions(shape, depth)
    # An edge that skips layers would cross the boxes in between: it arcs on the right.
    fig, ax = plt.subplots(figsize=(5.0, 1.1 * (max(depth.values()) + 1)))
    routers: dict[str, str] = {}
    for source, target, conditional, label in shape.edges:
        (x0, y0), (x1, y1) = pos[source], pos[target]
        span = depth[target] - depth[source]
        if span > 1:  # leave and enter on the right side, arcs nested by span
            start, end, rad = (x0 + 0.42, y0), (x1 + 0.42, y1), -0.25 - 0.1 * span
        else:
            start, end, rad = (x0, y0 - 0.18), (x1, y1 + 0.18), 0.0
        ax.add_patch(FancyArrowPatch(
            start, end, arrowstyle="-|>", mutation_scale=14, linewidth=1.3,
            linestyle="--" if conditional else "-", color="#444444",
            connectionstyle=f"arc3,rad={rad}",
        ))  # fmt: skip
        if label:
            routers[source] = label
    for source, label in routers.items():
        x, y = pos[source]
        ax.text(x - 0.5, y - 0.32, label + "()", fontsize=7.5, color="#555555",
                ha="right", va="center", style="italic")  # fmt: skip
    for node in shape.nodes:
        x, y = pos[node]
        terminal = node.startswith("__")
        ax.add_patch(FancyBboxPatch(
            (x - 0.42, y - 0.18), 0.84, 0.36,
            boxstyle="round,pad=0.02,rounding_size=0.17" if terminal else "round,pad=0.02",
            facecolor="#ffffff" if terminal else "#f2f0ff",
            edgecolor="#666666", linewidth=1.2,
        ))  # fmt: skip
        ax.text(x, y, node.strip("_") if terminal else node, ha="center", va="center",
                fontsize=10, family="monospace")  # fmt: skip
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    ax.set_xlim(min(xs) - 1.4, max(xs) + 1.4)
    ax.set_ylim(min(ys) - 0.5, max(ys) + 0.5)
    ax.set_aspect("equal")
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=10)
    fig.text(0.5, 0.02, "dashed: conditional edge, chosen by the router named beside its source",
             ha="center", fontsize=7.5, color="#555555")  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return out
