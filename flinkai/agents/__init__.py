"""Per-event risk decisions: a LangGraph graph of fraud, credit and limit agents.

* :mod:`flinkai.agents.data`: the risk data sets and the transaction stream built from them;
* :mod:`flinkai.agents.transactions`: validating raw transaction events;
* :mod:`flinkai.agents.train`: training both models offline (LightGBM -> ONNX);
* :mod:`flinkai.agents.models`: the models at run time (ONNX Runtime);
* :mod:`flinkai.agents.window`: an account's 24 h spend as plain data;
* :mod:`flinkai.agents.graph`: the decision graph;
* :mod:`flinkai.agents.plan`: running a LangGraph graph as a straight walk of its nodes;
* :mod:`flinkai.agents.draw`: the graph as a picture, from LangGraph's structure.

The Flink operator is :func:`flinkai.operators.agents.decide`.
"""

from flinkai.agents.graph import GRAPH_VERSION, Decision, RiskGraph

__all__ = ["GRAPH_VERSION", "Decision", "RiskGraph"]
