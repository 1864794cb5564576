"""``flinkai agents``: the risk decision graph's tools (``draw``)."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["register"]


def _draw(args: argparse.Namespace) -> int:
    from flinkai.agents.draw import draw_png, graph_shape
    from flinkai.agents.graph import GRAPH_VERSION, RiskGraph

    # The structure does not depend on the models: draw it without loading them.
    graph = RiskGraph(None, None, 0.0, 0.0, {"fraud": "-", "credit": "-"})  # type: ignore[arg-type]
    out = draw_png(graph_shape(graph.compiled), Path(args.out), title=GRAPH_VERSION)
    print(f"wrote {out}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``flinkai agents``."""
    p = sub.add_parser("agents", help="the risk decision graph (LangGraph)")
    group = p.add_subparsers(dest="agents_command", metavar="ACTION", required=True)
    draw = group.add_parser(
        "draw",
        help="draw the graph as a PNG from LangGraph's own structure (get_graph())",
        description="Nodes and edges come from the compiled graph's get_graph(); "
        "conditional edges are dashed and labelled with their router. No models needed.",
    )
    draw.add_argument("--out", default="docs/img/risk_graph.png", help="PNG path")
    draw.set_defaults(handler=_draw)
