"""Errors raised by the risk-decision agents (data, models, graph)."""

from __future__ import annotations

from flinkai.errors import FlinkAIError

__all__ = ["AgentsError", "PlanError", "RiskDataError", "RiskModelError"]


class AgentsError(FlinkAIError):
    """Base class for errors from :mod:`flinkai.agents`."""


class RiskDataError(AgentsError, ValueError):
    """A risk data file (transactions, clients) is missing or malformed."""


class RiskModelError(AgentsError):
    """A risk model is missing, malformed, or cannot be trained or loaded."""


class PlanError(AgentsError):
    """A graph the plan runtime cannot run as LangGraph's Pregel loop would, or a node or
    router that broke the plan's rules while it ran (:mod:`flinkai.agents.plan`)."""
