"""Reading Flink's ``EXPLAIN`` output: which Python operators a job will run.

Every Python operator is a round trip between the JVM and a Python worker with its
own bundle timer, so the count matters for latency: ``parse_click`` and
``text_to_vector`` in one ``PythonCalc`` wait for one bundle, in two they wait twice.
"""

from __future__ import annotations

import re

__all__ = ["execution_plan", "python_operators"]

_SECTION = "== Optimized Execution Plan =="
# Node names of Flink's Python operators: PythonCalc, PythonCorrelate, PythonGroupAggregate...
_PYTHON_NODE = re.compile(r"\b(Python[A-Za-z]+)\(")


def execution_plan(plan: str) -> str:
    """The "Optimized Execution Plan" part of an explain text (all of it when absent)."""
    start = plan.find(_SECTION)
    if start < 0:
        return plan
    end = plan.find("\n== ", start + len(_SECTION))
    return plan[start + len(_SECTION) : end if end >= 0 else len(plan)].strip()


def python_operators(plan: str) -> list[str]:
    """The Python operator nodes of the execution plan, one plan line each, in order.

    A line looks like ``PythonCalc(select=[payload, parse_click(payload) AS f0, ...])``.
    A statement set explains all its sinks together: Flink prints an operator shared
    by several sinks once (later ones read ``Reused(reference_id=...)``), so two equal
    lines here are two operators doing the same work.
    """
    nodes = []
    for line in execution_plan(plan).splitlines():
        m = _PYTHON_NODE.search(line)
        if m:
            nodes.append(line[m.start() :].strip())
    return nodes
