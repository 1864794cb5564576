"""The decision graph's picture is drawn from LangGraph's own structure."""

from __future__ import annotations

from pathlib import Path

import pytest

from flinkai.agents.draw import GraphShape, draw_png, graph_shape, layers
from flinkai.agents.errors import AgentsError
from flinkai.agents.graph import RiskGraph


def _graph() -> RiskGraph:
    return RiskGraph(None, None, 0.5, 0.5, {"fraud": "f", "credit": "c"})  # type: ignore[arg-type]


def test_shape_is_langgraphs_nodes_and_edges() -> None:
    shape = graph_shape(_graph().compiled)
    assert set(shape.nodes) == {"__start__", "fraud", "credit", "limit", "decide", "__end__"}
    assert set(shape.edges) == {
        ("__start__", "fraud", False, ""),
        ("fraud", "credit", True, "after_fraud"),
        ("fraud", "decide", True, "after_fraud"),
        ("credit", "limit", True, "after_credit"),
        ("credit", "decide", True, "after_credit"),
        ("limit", "decide", False, ""),
        ("decide", "__end__", False, ""),
    }


def test_layers_are_longest_distance_from_start() -> None:
    depth = layers(graph_shape(_graph().compiled))
    assert depth == {"__start__": 0, "fraud": 1, "credit": 2, "limit": 3, "decide": 4,
                     "__end__": 5}  # fmt: skip


def test_a_cycle_is_refused() -> None:
    shape = GraphShape(("a", "b"), (("a", "b", False, ""), ("b", "a", True, "r")))
    with pytest.raises(AgentsError, match="cycle"):
        layers(shape)


def test_draw_png_writes_a_png(tmp_path: Path) -> None:
    out = draw_png(graph_shape(_graph().compiled), tmp_path / "g" / "risk.png", title="t")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 5_000
